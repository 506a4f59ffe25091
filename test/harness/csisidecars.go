package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The kubernetes-csi sidecars the harness builds from the module proxy: the releases the
// CSI manifests of the pinned Kubernetes name.
const (
	CSIProvisionerVersion = "v6.3.0"
	CSIAttacherVersion    = "v4.12.0"
)

// Their images, under the public names mapped to the local registry (containerd resolves
// registry.k8s.io there).
var (
	CSIProvisionerImage = "registry.k8s.io/" + csiProvisionerPath
	CSIAttacherImage    = "registry.k8s.io/" + csiAttacherPath
)

const (
	csiProvisionerPath = "sig-storage/csi-provisioner:" + CSIProvisionerVersion
	csiAttacherPath    = "sig-storage/csi-attacher:" + CSIAttacherVersion
)

// The sidecars, like every module the harness builds from the proxy beside the upstream
// binaries, are built with the upstream build's versions of what they share (modalign.go).
var csiProvisionerBinary = moduleBinary{name: "csi-provisioner", module: "github.com/kubernetes-csi/external-provisioner/v6",
	version: CSIProvisionerVersion, pkg: "./cmd/csi-provisioner", ldflags: "-X main.version=" + CSIProvisionerVersion,
	prepare: nameCapacityInformerType}

// nameCapacityInformerType lets csi-provisioner's main compile against the upstream build's
// client-go (a minor newer than its own), which changes nothing it does: there, the
// CSIStorageCapacity informer a factory returns is of a wider interface type, so the
// variable main declares from it can no longer take the v1beta1 bridge's informer; declared
// with the interface both satisfy, it can. An edit that finds nothing to change fails the
// build: a release that changed the lines must be looked at again.
func nameCapacityInformerType(src string) error {
	return editSource(filepath.Join(src, "cmd/csi-provisioner/csi-provisioner.go"),
		"\t\"k8s.io/client-go/informers\"\n",
		"\t\"k8s.io/client-go/informers\"\n\tstorageinformersv1 \"k8s.io/client-go/informers/storage/v1\"\n",
		"cInformer := factoryForNamespace.Storage().V1().CSIStorageCapacities()",
		"var cInformer storageinformersv1.CSIStorageCapacityInformer = factoryForNamespace.Storage().V1().CSIStorageCapacities()")
}

// editSource replaces, in the file at path, each old of pairs (old, new, old, new...) that
// occurs there exactly once by its new.
func editSource(path string, pairs ...string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	for i := 0; i+1 < len(pairs); i += 2 {
		if n := strings.Count(s, pairs[i]); n != 1 {
			return fmt.Errorf("%s: %q occurs %d times, want once", path, pairs[i], n)
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// csiSidecars are built one after the other, never side by side: each takes most of the
// machine for minutes when cold.
var csiSidecars = []struct {
	bin       moduleBinary
	imagePath string
}{
	{csiProvisionerBinary, csiProvisionerPath},
	{moduleBinary{name: "csi-attacher", module: "github.com/kubernetes-csi/external-attacher/v4",
		version: CSIAttacherVersion, pkg: "./cmd/csi-attacher", ldflags: "-X main.version=" + CSIAttacherVersion},
		csiAttacherPath},
}

// EnsureCSISidecars builds csi-provisioner and csi-attacher into the cache unless a
// previous run did, and returns their paths by image path in the registry.
func (c *Config) EnsureCSISidecars(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range csiSidecars {
		p, err := c.ensureModuleBinary(ctx, s.bin)
		if err != nil {
			return nil, err
		}
		out[s.imagePath] = p
	}
	return out, nil
}
