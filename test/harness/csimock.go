package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The upstream `[sig-storage] CSI Mock` specs deploy, per spec, the manifests of
// csiMockManifests in the pinned release: a StatefulSet with csi-provisioner, the
// node-driver-registrar and the driver (the image hostpathplugin), plus csi-attacher,
// csi-resizer or csi-snapshotter beside it as the spec asks. The driver runs as a mock that
// logs its calls (csi-mock-driver.yaml), or as a proxy to the mock driver inside e2e.test,
// beside a busybox (csi-mock-proxy.yaml). e2e.test lists these images under their public
// names and moves them to KUBE_TEST_REPO_LIST's registries only as it deploys a manifest,
// so CSIMockImageRefs names them as the pods pull them, and the builders below make them:
//
//   - csi-provisioner, csi-attacher: built from the module proxy at the manifests'
//     versions (csisidecars.go), as for the hostpath driver of make up;
//   - csi-snapshotter: built from the module proxy at the manifest's version
//     (snapshots.go), with the snapshot CRDs and controller the csimock scope installs;
//   - csi-node-driver-registrar: the project's registrar (test/images/csi-registrar), the
//     module being refused by the proxy;
//   - csi-resizer: the project's resizer (test/images/csi-resizer), that module being
//     refused too;
//   - hostpathplugin: test/images/csi-mock, which takes the plugin's flags and is the mock
//     driver or the proxy the manifests ask for (that module is refused too);
//   - e2e-test-images/busybox: the harness's busybox, as for any tag of it.
const csiMockManifests = "test/e2e/testing-manifests/storage-csi/mock"

// publicRegistry is where the upstream manifests' images come from; the repo list and
// containerd's registry hosts put the local registry in its place.
const publicRegistry = "registry.k8s.io/"

// CSIMockSnapshotterManifest is the manifest of the sidecar only the snapshot specs deploy:
// the smoke run, which has none of them, leaves its image (a build from the module proxy, a
// minute or more on a new machine) out.
const CSIMockSnapshotterManifest = "csi-mock-driver-snapshotter.yaml"

// CSIMockImageRefs returns refs (as `e2e.test --list-images` prints them) with every image
// the CSI Mock manifests of the pinned release name at its local name, which is where the
// specs' pods pull it from, in place of its public one; the images of the manifests named
// in skip are left out.
func (c *Config) CSIMockImageRefs(ctx context.Context, refs []string, skip ...string) ([]string, error) {
	_, mod, err := c.kubernetesModule(ctx)
	if err != nil {
		return nil, err
	}
	images, err := manifestImages(filepath.Join(mod.Dir, csiMockManifests), skip...)
	if err != nil {
		return nil, err
	}
	return withLocalImages(refs, images), nil
}

// manifestImages returns the images the pod templates of the manifests in dir name (but
// those of the files named in skip), sorted, each once.
func manifestImages(dir string, skip ...string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s", dir)
	}
	var images []string
	for _, f := range files {
		if slices.Contains(skip, filepath.Base(f)) {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := decodeManifest(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, o := range objs {
			images = append(images, podTemplateImages(o)...)
		}
	}
	slices.Sort(images)
	return slices.Compact(images), nil
}

// podTemplateImages returns the images of a workload's pod template (spec.template.spec),
// none for other objects.
func podTemplateImages(o *unstructured.Unstructured) []string {
	var images []string
	for _, field := range []string{"initContainers", "containers"} {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
		for _, c := range containers {
			if m, ok := c.(map[string]any); ok {
				if image, ok := m["image"].(string); ok && image != "" {
					images = append(images, image)
				}
			}
		}
	}
	return images
}

// localImageRef is where a public image is pulled from on this harness: the local
// registry, under the path the public name has there.
func localImageRef(image string) string {
	if path, ok := strings.CutPrefix(image, publicRegistry); ok {
		return RegistryAddr + "/" + path
	}
	return image
}

// withLocalImages returns refs with each of images (public names) at its local name: in
// place of the public name where refs has it, appended where it has neither.
func withLocalImages(refs, images []string) []string {
	local := map[string]string{}
	for _, im := range images {
		local[im] = localImageRef(im)
	}
	out := make([]string, 0, len(refs)+len(images))
	seen := map[string]bool{}
	add := func(ref string) {
		if !seen[ref] {
			seen[ref] = true
			out = append(out, ref)
		}
	}
	for _, ref := range refs {
		if l, ok := local[ref]; ok {
			ref = l
		}
		add(ref)
	}
	for _, im := range images {
		add(local[im])
	}
	return out
}

// csiSidecarBuilder makes the image of one of csiSidecars or snapshotBinaries (by binary
// name): the binary alone, built from the module proxy at its pinned version (a cold build
// takes minutes; the conformance runner builds them before the cluster comes up).
func csiSidecarBuilder(name string) imageBuilder {
	return func(ctx context.Context, b *baseImages, tag string) (v1.Image, string, string, error) {
		s, ok := csiSidecar(name)
		if !ok {
			return nil, "", "", fmt.Errorf("no CSI sidecar %q", name)
		}
		bin, err := b.cfg.ensureModuleBinary(ctx, s)
		if err != nil {
			return nil, "", "", err
		}
		l, err := cachedBinaryLayer(bin)
		if err != nil {
			return nil, "", "", err
		}
		img, err := imageOf(v1.Config{Entrypoint: []string{"/" + name}, Env: []string{imagePath}}, l)
		standIn := ""
		if tag != s.version {
			standIn = fmt.Sprintf("%s %s under the tag %s", name, s.version, tag)
		}
		return img, standIn, fmt.Sprintf("built from %s@%s; the static binary alone (upstream's: over distroless)", s.module, s.version), err
	}
}

// csiSidecar returns the binary of csiSidecars or snapshotBinaries named name.
func csiSidecar(name string) (moduleBinary, bool) {
	for _, s := range csiSidecars {
		if s.bin.name == name {
			return s.bin, true
		}
	}
	for _, s := range snapshotBinaries {
		if s.bin.name == name {
			return s.bin, true
		}
	}
	return moduleBinary{}, false
}

// csiRegistrarBuilder makes node-driver-registrar's image of the project's registrar.
func csiRegistrarBuilder(ctx context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
	img, err := b.cfg.projectImage(ctx, "csi-registrar")
	return img, "the project's registrar (test/images/csi-registrar): gets the driver's name, serves the plugin registration socket to the node agent and /healthz; upstream's module is refused by the Go module proxy", "", err
}

// csiResizerBuilder makes csi-resizer's image of the project's resizer.
func csiResizerBuilder(ctx context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
	img, err := b.cfg.projectImage(ctx, "csi-resizer")
	return img, "the project's resizer (test/images/csi-resizer): external-resizer v2.2.0's resize controller with volume expansion recovery, the pre-resize annotation and its flags, without the VolumeAttributesClass modify controller or metrics; upstream's module is refused by the Go module proxy", "", err
}

// csiMockPluginBuilder makes hostpathplugin's image of test/images/csi-mock, over busybox
// so that one can exec into it. It stands in for the plugin only as the CSI Mock manifests
// run it.
func csiMockPluginBuilder(ctx context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
	img, err := b.cfg.projectImage(ctx, "csi-mock", b.busyboxLayer)
	return img, "test/images/csi-mock, for the CSI Mock specs only: with -proxy-endpoint it pairs the CSI socket with the connections e2e.test makes to the pod's port (e2e.test serves its embedded mock driver on them); without, an in-memory mock driver with the hostpath plugin's flags that logs every call as `gRPCCall: <json>` for e2e.test; upstream's module is refused by the Go module proxy", "", err
}

// projectImage is the image of the project's command test/images/<name>, built by
// buildImageBinary, as /<name> over the layers under.
func (c *Config) projectImage(ctx context.Context, name string, under ...v1.Layer) (v1.Image, error) {
	data, err := c.buildImageBinary(ctx, name, "./test/images/"+name)
	if err != nil {
		return nil, err
	}
	l, err := c.layerOf([]tarFile{{name: name, mode: 0o755, data: data}})
	if err != nil {
		return nil, err
	}
	return imageOf(v1.Config{Entrypoint: []string{"/" + name}, Env: []string{imagePath}}, append(under, l)...)
}

// buildImageBinary compiles one of the project's image commands statically (imageBinPath)
// and returns it: an unchanged one is not even linked again.
func (c *Config) buildImageBinary(ctx context.Context, name, pkg string) ([]byte, error) {
	out := c.imageBinPath("csimock", name)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	p := c.startQuietBuild(name+" image", name)
	// Without -trimpath, as buildCSIImages: the client libraries the unit tests compiled are
	// found compiled (the resizer's build in make test's smoke run, on a new machine).
	err := runBuild(ctx, c.RepoDir, []string{"CGO_ENABLED=0"}, p, "go", "build", "-v", "-ldflags", "-s -w", "-o", out, pkg)
	p.end(err)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}
