package harness

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestManifestImages(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"driver.yaml": `kind: StatefulSet
apiVersion: apps/v1
metadata:
  name: csi-mockplugin
spec:
  template:
    spec:
      initContainers:
        - name: init
          image: registry.k8s.io/e2e-test-images/busybox:1.36.1-1
      containers:
        - name: csi-provisioner
          image: registry.k8s.io/sig-storage/csi-provisioner:v6.3.0
        - name: mock
          image: registry.k8s.io/sig-storage/hostpathplugin:v1.17.1
`,
		"attacher.yaml": `kind: StatefulSet
apiVersion: apps/v1
metadata:
  name: csi-mockplugin-attacher
spec:
  template:
    spec:
      containers:
        - name: csi-attacher
          image: registry.k8s.io/sig-storage/csi-attacher:v4.12.0
        - name: again
          image: registry.k8s.io/sig-storage/hostpathplugin:v1.17.1
`,
		"rbac.yaml": "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: csi-mock\n---\napiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n  name: mock.storage.k8s.io\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := manifestImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"registry.k8s.io/e2e-test-images/busybox:1.36.1-1",
		"registry.k8s.io/sig-storage/csi-attacher:v4.12.0",
		"registry.k8s.io/sig-storage/csi-provisioner:v6.3.0",
		"registry.k8s.io/sig-storage/hostpathplugin:v1.17.1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("manifestImages = %q, want %q", got, want)
	}
	if _, err := manifestImages(t.TempDir()); err == nil {
		t.Error("a directory without manifests gave no error")
	}
}

func TestWithLocalImages(t *testing.T) {
	refs := []string{
		RegistryAddr + "/pause:3.10.2",
		"registry.k8s.io/sig-storage/csi-attacher:v4.12.0",
		"registry.k8s.io/sig-storage/livenessprobe:v2.19.0",
	}
	images := []string{
		"registry.k8s.io/e2e-test-images/busybox:1.36.1-1",
		"registry.k8s.io/sig-storage/csi-attacher:v4.12.0",
	}
	got := withLocalImages(refs, images)
	want := []string{
		RegistryAddr + "/pause:3.10.2",
		RegistryAddr + "/sig-storage/csi-attacher:v4.12.0",
		"registry.k8s.io/sig-storage/livenessprobe:v2.19.0", // not the mock's: stays public, not provided
		RegistryAddr + "/e2e-test-images/busybox:1.36.1-1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("withLocalImages =\n%q\nwant\n%q", got, want)
	}
	// The local names are where the repo list sends the suite's pulls.
	list := ConformanceRepoList()
	for _, l := range []string{"sigStorageRegistry: " + RegistryAddr + "/sig-storage", "promoterE2eRegistry: " + RegistryAddr + "/e2e-test-images"} {
		if !strings.Contains(list, l+"\n") {
			t.Errorf("the repo list lacks %q: the local names would not be pulled", l)
		}
	}
}

// TestCSIMockManifestsHaveBuilders reads the CSI Mock manifests of the pinned release
// (from the module cache, downloaded if need be) and checks that the harness makes
// every image they name, each sidecar at the version the manifests name.
func TestCSIMockManifestsHaveBuilders(t *testing.T) {
	version, err := KubeVersion("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Downloaded when not in the module cache yet (a fresh machine's unit tests run before
	// the upstream build, which needs the module too).
	mod, err := goModDownload(context.Background(), "k8s.io/kubernetes@"+version)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mod.Dir, csiMockManifests)
	images, err := manifestImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	var built []string
	for _, ref := range withLocalImages(nil, images) {
		repo, tag, ok := localRepoTag(ref)
		if !ok {
			t.Errorf("%s: not at a local name", ref)
			continue
		}
		if conformanceBuilders[repo] == nil {
			t.Errorf("%s: no builder", ref)
		}
		if s, ok := csiSidecar(strings.TrimPrefix(repo, "sig-storage/")); ok && s.version != tag {
			t.Errorf("%s: the harness builds %s %s", ref, s.name, s.version)
		}
		built = append(built, repo)
	}
	for _, want := range []string{"sig-storage/csi-provisioner", "sig-storage/csi-attacher", "sig-storage/csi-snapshotter", "sig-storage/csi-node-driver-registrar", "sig-storage/csi-resizer", "sig-storage/hostpathplugin", "e2e-test-images/busybox"} {
		if !slices.Contains(built, want) {
			t.Errorf("the manifests no longer name %s (they name %q): check the CSI Mock stand-ins", want, images)
		}
	}
	// The smoke run's images: not the snapshotter, whose build from the module proxy would
	// lengthen make test on a new machine.
	smoke, err := manifestImages(dir, CSIMockSnapshotterManifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range smoke {
		if strings.Contains(im, "csi-snapshotter") {
			t.Errorf("the smoke run's images include %s", im)
		}
	}
	if !slices.Contains(smoke, publicRegistry+csiProvisionerPath) || !slices.Contains(smoke, publicRegistry+"sig-storage/csi-resizer:v2.2.0") {
		t.Errorf("the smoke run's images %q lack csi-provisioner or csi-resizer", smoke)
	}
}
