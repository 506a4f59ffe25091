package harness

import "context"

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

// csiProvisionerBinary is built as released; the other modules the harness builds from the
// proxy (csi-attacher, CoreDNS) are built with its versions of what they share, after it.
var csiProvisionerBinary = moduleBinary{name: "csi-provisioner", module: "github.com/kubernetes-csi/external-provisioner/v6",
	version: CSIProvisionerVersion, pkg: "./cmd/csi-provisioner", ldflags: "-X main.version=" + CSIProvisionerVersion}

// csiSidecars are built one after the other, never side by side: each takes most of the
// machine for minutes when cold.
var csiSidecars = []struct {
	bin       moduleBinary
	imagePath string
}{
	{csiProvisionerBinary, csiProvisionerPath},
	{moduleBinary{name: "csi-attacher", module: "github.com/kubernetes-csi/external-attacher/v4",
		version: CSIAttacherVersion, pkg: "./cmd/csi-attacher", ldflags: "-X main.version=" + CSIAttacherVersion,
		alignWith: &csiProvisionerBinary},
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
