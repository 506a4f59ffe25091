package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// Volume snapshots as the pinned release ships them: its addon
// (cluster/addons/volumesnapshots) has the VolumeSnapshot CRDs and the
// volume-snapshot-controller StatefulSet in kube-system, with its metrics on :9102, which is
// where e2e.test's metrics grabber looks for them; the CSI Mock manifests run csi-snapshotter
// beside the driver. Both binaries come from external-snapshotter at the release the two
// name (TestSnapshotAddonIsWhatTheHarnessBuilds, TestCSIMockManifestsHaveBuilders).
const CSISnapshotterVersion = "v8.6.0"

const (
	snapshotAddon          = "cluster/addons/volumesnapshots"
	snapshotterModule      = "github.com/kubernetes-csi/external-snapshotter/v8"
	snapshotClientModule   = "github.com/kubernetes-csi/external-snapshotter/client/v8"
	snapshotControllerSet  = "volume-snapshot-controller"
	csiSnapshotterPath     = "sig-storage/csi-snapshotter:" + CSISnapshotterVersion
	snapshotControllerPath = "sig-storage/snapshot-controller:" + CSISnapshotterVersion
)

// snapshotterModEdit: the module's go.mod replaces its client module by ./client, a
// directory of its repository that the module's zip does not hold; the copy requires the
// client released with it instead.
var snapshotterModEdit = []string{"-dropreplace", snapshotClientModule, "-require", snapshotClientModule + "@" + CSISnapshotterVersion}

// snapshotBinaries are built one after the other, like csiSidecars, and only for the
// clusters that install snapshots; with the upstream build's versions of what they share
// (modalign.go), so that they find most of their packages compiled.
var snapshotBinaries = []struct {
	bin       moduleBinary
	imagePath string
}{
	{moduleBinary{name: "csi-snapshotter", module: snapshotterModule, version: CSISnapshotterVersion,
		pkg: "./cmd/csi-snapshotter", ldflags: "-X main.version=" + CSISnapshotterVersion, modEdit: snapshotterModEdit},
		csiSnapshotterPath},
	{moduleBinary{name: "snapshot-controller", module: snapshotterModule, version: CSISnapshotterVersion,
		pkg: "./cmd/snapshot-controller", ldflags: "-X main.version=" + CSISnapshotterVersion, modEdit: snapshotterModEdit},
		snapshotControllerPath},
}

// EnsureSnapshotter builds csi-snapshotter and snapshot-controller into the cache unless
// a previous run did, and returns their paths by image path in the registry.
func (c *Config) EnsureSnapshotter(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range snapshotBinaries {
		p, err := c.ensureModuleBinary(ctx, s.bin)
		if err != nil {
			return nil, err
		}
		out[s.imagePath] = p
	}
	return out, nil
}

// installVolumeSnapshots applies the addon: its CRDs, waited for until the apiserver serves
// them (the controller gives up on CRDs it does not find within 30 s), then the controller
// with its RBAC; and waits until the controller's pod is Ready. Its image is pushed here: the
// pod pulls registry.k8s.io's name, which containerd resolves to the local registry.
func (c *Config) installVolumeSnapshots(ctx context.Context) error {
	bins, err := c.EnsureSnapshotter(ctx)
	if err != nil {
		return err
	}
	l, err := cachedBinaryLayer(bins[snapshotControllerPath])
	if err != nil {
		return err
	}
	img, err := imageOf(v1.Config{Entrypoint: []string{"/snapshot-controller"}, Env: []string{imagePath}}, l)
	if err != nil {
		return err
	}
	if err := pushImage(ctx, RegistryAddr+"/"+snapshotControllerPath, img); err != nil {
		return err
	}
	_, mod, err := c.kubernetesModule(ctx)
	if err != nil {
		return err
	}
	crds, err := readManifests(filepath.Join(mod.Dir, snapshotAddon, "crd"), nil)
	if err != nil {
		return err
	}
	if err := c.applyObjects(ctx, crds); err != nil {
		return err
	}
	if err := c.waitCRDsEstablished(ctx, crds); err != nil {
		return err
	}
	controller, err := readManifests(filepath.Join(mod.Dir, snapshotAddon, "volume-snapshot-controller"), nil)
	if err != nil {
		return err
	}
	if err := c.applyObjects(ctx, controller); err != nil {
		return err
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	return c.waitReady(ctx, "agent", 3*time.Minute, func(ctx context.Context) error {
		s, err := cs.AppsV1().StatefulSets("kube-system").Get(ctx, snapshotControllerSet, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Status.ReadyReplicas < 1 {
			return fmt.Errorf("statefulset kube-system/%s: %d replicas ready", snapshotControllerSet, s.Status.ReadyReplicas)
		}
		return nil
	})
}

// waitCRDsEstablished waits until every CustomResourceDefinition of objs is Established.
func (c *Config) waitCRDsEstablished(ctx context.Context, objs []*unstructured.Unstructured) error {
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		err := c.waitReady(ctx, "kube-apiserver", time.Minute, func(ctx context.Context) error {
			got, err := crds.Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !crdEstablished(got) {
				return fmt.Errorf("CRD %s is not Established yet", o.GetName())
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// crdEstablished says whether the CRD's Established condition is True.
func crdEstablished(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
