package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestSnapshotAddonIsWhatTheHarnessBuilds reads the pinned release's snapshot addon (from
// the module cache, downloaded if need be): its CRDs are the three VolumeSnapshot kinds,
// and its controller is the StatefulSet the harness waits for, running the snapshot
// controller at the version the harness builds, with its metrics on e2e.test's port.
func TestSnapshotAddonIsWhatTheHarnessBuilds(t *testing.T) {
	version, err := KubeVersion("../..")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := goModDownload(context.Background(), "k8s.io/kubernetes@"+version)
	if err != nil {
		t.Fatal(err)
	}
	crds, err := readManifests(filepath.Join(mod.Dir, snapshotAddon, "crd"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range crds {
		if o.GetKind() != "CustomResourceDefinition" {
			t.Errorf("crd/ holds a %s", o.GetKind())
		}
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		kinds = append(kinds, kind)
	}
	slices.Sort(kinds)
	if want := []string{"VolumeSnapshot", "VolumeSnapshotClass", "VolumeSnapshotContent"}; !slices.Equal(kinds, want) {
		t.Errorf("CRDs of %q, want %q", kinds, want)
	}
	objs, err := readManifests(filepath.Join(mod.Dir, snapshotAddon, "volume-snapshot-controller"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var set *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "StatefulSet" {
			set = o
		}
	}
	if set == nil || set.GetName() != snapshotControllerSet || set.GetNamespace() != "kube-system" {
		t.Fatalf("no StatefulSet kube-system/%s in the addon", snapshotControllerSet)
	}
	if images := podTemplateImages(set); !slices.Equal(images, []string{publicRegistry + snapshotControllerPath}) {
		t.Errorf("the controller runs %q; the harness builds %s", images, snapshotControllerPath)
	}
	containers, _, _ := unstructured.NestedSlice(set.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	if !slices.Contains(args, "--http-endpoint=:9102") {
		t.Errorf("the controller's args %q: its metrics are not on :9102, where e2e.test looks", args)
	}
	// A number from YAML is an int64 or a float64, as the decoder found it.
	if replicas, _, _ := unstructured.NestedFieldNoCopy(set.Object, "spec", "replicas"); fmt.Sprint(replicas) != "1" {
		t.Errorf("%v replicas, want the one the harness waits for", replicas)
	}
}
