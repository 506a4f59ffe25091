package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ConformanceRepoList is the KUBE_TEST_REPO_LIST file of the upstream e2e suite: every
// registry its images come from points at the local registry, under the path of the
// public name (registry.k8s.io/e2e-test-images/agnhost becomes
// 127.0.0.1:5000/e2e-test-images/agnhost), so no pull leaves the machine. The invalid
// registry is a path where nothing is ever pushed, so its pulls fail as the tests expect;
// the private one is the registry behind a password.
func ConformanceRepoList() string {
	local := func(p string) string { return strings.TrimSuffix(RegistryAddr+"/"+p, "/") }
	entries := [][2]string{
		{"promoterE2eRegistry", local("e2e-test-images")},
		{"buildImageRegistry", local("build-image")},
		{"invalidRegistry", local("invalid-registry/invalid")},
		{"gcEtcdRegistry", local("")},
		{"gcRegistry", local("")},
		{"sigStorageRegistry", local("sig-storage")},
		{"privateRegistry", AuthRegistry + "/k8s-authenticated-test"},
		{"dockerLibraryRegistry", local("library")},
		{"cloudProviderGcpRegistry", local("cloud-provider-gcp")},
	}
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "%s: %s\n", e[0], e[1])
	}
	return b.String()
}

// ConformanceImage is one image of the e2e suite as the harness provides it.
type ConformanceImage struct {
	// Ref is the image as the suite names it (after KUBE_TEST_REPO_LIST).
	Ref string
	// StandIn is set when the image is not built from the upstream image's own sources: it
	// says what serves in its place.
	StandIn string
	// Note says how a faithful build still differs from upstream's image.
	Note string
}

// imageBuilder makes the image for one repository of the local registry at a tag.
type imageBuilder func(ctx context.Context, b *baseImages, tag string) (img v1.Image, standIn, note string, err error)

// conformanceBuilders are the images of the e2e suite the harness can make, by repository
// path in the local registry.
var conformanceBuilders = map[string]imageBuilder{
	"pause": func(_ context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
		return b.pause, "", "nodeagent's Go pause (test/images/pause) in place of upstream's C one: it sleeps, reaps children and exits on SIGTERM/SIGINT the same way", nil
	},
	"e2e-test-images/busybox": busyboxBuilder,
	"library/busybox":         busyboxBuilder,
	"e2e-test-images/agnhost": func(_ context.Context, b *baseImages, tag string) (v1.Image, string, string, error) {
		note := "agnhost built from the pinned release's source; its base is busybox with Debian's curl, bash, OpenBSD netcat, dig and getent (upstream: Alpine with curl, bash, bind-tools, iproute2, netcat-openbsd, socat, iperf)"
		if tag != AgnhostTag {
			return b.agnhost, "agnhost " + AgnhostTag + " under the tag " + tag, note, nil
		}
		return b.agnhost, "", note, nil
	},
	"e2e-test-images/nginx":      nginxBuilder,
	"e2e-test-images/nonewprivs": nonewprivsBuilder,
	"e2e-test-images/nonroot": func(_ context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
		img, err := imageOf(v1.Config{Cmd: []string{"sh"}, Env: []string{imagePath}, User: "1234"}, b.busyboxLayer)
		return img, "", "USER 1234 over busybox (upstream: over debian-base)", err
	},
	"e2e-test-images/glibc-dns-testing": glibcDNSBuilder,
	"e2e-test-images/sample-apiserver":  sampleAPIServerBuilder,
	"etcd":                              etcdBuilder,
	"e2e-test-images/kitten":            webserverBuilder("kitten"),
	"e2e-test-images/nautilus":          webserverBuilder("nautilus"),
	// The CSI Mock specs' manifests (csimock.go). The suite lists them under their public
	// names, which no run pushes; the csimock scope moves them to the local registry
	// (CSIMockImageRefs), so only its runs build them.
	"sig-storage/csi-provisioner":           csiSidecarBuilder("csi-provisioner"),
	"sig-storage/csi-attacher":              csiSidecarBuilder("csi-attacher"),
	"sig-storage/csi-snapshotter":           csiSidecarBuilder("csi-snapshotter"),
	"sig-storage/csi-node-driver-registrar": csiRegistrarBuilder,
	"sig-storage/csi-resizer":               csiResizerBuilder,
	"sig-storage/hostpathplugin":            csiMockPluginBuilder,
}

// glibcDNSBuilder: upstream's image is Debian with dnsutils, for the DNS specs' glibc querier
// (a shell loop of dig and getent). Here: busybox with this machine's dig and getent, which
// are Debian's, glibc-linked.
func glibcDNSBuilder(ctx context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
	tools, err := hostToolFiles(ctx, dnsTools)
	if err != nil {
		return nil, "", "", err
	}
	layer, err := b.cfg.layerOf(append(tools, nsswitchConf))
	if err != nil {
		return nil, "", "", err
	}
	img, err := imageOf(v1.Config{Cmd: []string{"sh"}, Env: []string{imagePath}}, b.busyboxLayer, layer)
	return img, "", "Debian's dig and getent over busybox (upstream: Debian with dnsutils)", err
}

// errNotThisRun is returned by a builder whose image this run does not make: the image is
// listed as not provided.
var errNotThisRun = errors.New("not built for this run")

// etcdBuilder: upstream's image is etcd's release binaries over a distroless base; the
// sample API server's pod runs /usr/local/bin/etcd. Here: the harness's own etcd (the
// version the pinned release names) over busybox.
func etcdBuilder(_ context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
	data, err := os.ReadFile(filepath.Join(b.upstreamBin, "etcd"))
	if err != nil {
		return nil, "", "", err
	}
	layer, err := b.cfg.layerOf([]tarFile{
		{name: "usr/local", dir: true, mode: 0o755},
		{name: "usr/local/bin", dir: true, mode: 0o755},
		{name: "usr/local/bin/etcd", mode: 0o755, data: data},
	})
	if err != nil {
		return nil, "", "", err
	}
	img, err := imageOf(v1.Config{Cmd: []string{"/usr/local/bin/etcd"}, Env: []string{imagePath}}, b.busyboxLayer, layer)
	return img, "", "the harness's etcd (the pinned release's) over busybox (upstream: over distroless)", err
}

// sampleAPIServerBuilder builds k8s.io/sample-apiserver at the pinned release's staging
// version (upstream's image tag is older: it builds an older sample-apiserver, which the
// spec names "1.17" for history's sake) as the image's entrypoint, over busybox. A build of
// its own: not for the smoke run.
func sampleAPIServerBuilder(ctx context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
	if !b.extra {
		return nil, "", "", errNotThisRun
	}
	version := "v0." + strings.TrimPrefix(b.kubeVersion, "v1.")
	bin, err := b.cfg.ensureModuleBinary(ctx, moduleBinary{name: "sample-apiserver", module: "k8s.io/sample-apiserver", version: version, pkg: "."})
	if err != nil {
		return nil, "", "", err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, "", "", err
	}
	layer, err := b.cfg.layerOf([]tarFile{{name: "sample-apiserver", mode: 0o755, data: data}})
	if err != nil {
		return nil, "", "", err
	}
	img, err := imageOf(v1.Config{Entrypoint: []string{"/sample-apiserver"}, Env: []string{imagePath}}, b.busyboxLayer, layer)
	return img, "k8s.io/sample-apiserver " + version + " (the pinned release's) under the older tag", "", err
}

func busyboxBuilder(_ context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
	return b.busybox, "", "", nil
}

// nginxBuilder: upstream's image is nginx on Alpine. The stand-in serves a page on port 80
// with busybox httpd and, like nginx, stops on SIGQUIT (its STOPSIGNAL) and SIGTERM.
func nginxBuilder(_ context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
	page := "<!DOCTYPE html>\n<html><head><title>nodeagent harness stand-in for nginx</title></head><body>served by busybox httpd</body></html>\n"
	layer, err := b.cfg.layerOf([]tarFile{
		{name: "usr/share/nginx", dir: true, mode: 0o755},
		{name: "usr/share/nginx/html", dir: true, mode: 0o755},
		{name: "usr/share/nginx/html/index.html", mode: 0o644, data: []byte(page)},
	})
	if err != nil {
		return nil, "", "", err
	}
	img, err := imageOf(v1.Config{
		Cmd:          []string{"/bin/sh", "-c", "trap 'exit 0' TERM QUIT; httpd -f -p 80 -h /usr/share/nginx/html & wait"},
		Env:          []string{imagePath},
		ExposedPorts: map[string]struct{}{"80/tcp": {}},
		StopSignal:   "SIGQUIT",
	}, b.busyboxLayer, layer)
	return img, "busybox httpd serving a page on port 80, stopping on SIGQUIT/SIGTERM", "", err
}

// nonewprivsBuilder builds upstream's nnp (it prints its effective uid) and installs it
// setuid root, as its Dockerfile does.
func nonewprivsBuilder(ctx context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
	// Built outside any module: nnp.go needs only the standard library.
	dir, err := os.MkdirTemp("", "nnp-")
	if err != nil {
		return nil, "", "", err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "nnp")
	src := filepath.Join(b.kubeSrc, "test/images/nonewprivs/nnp.go")
	if err := goCmdIn(ctx, dir, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-ldflags", "-s -w", "-o", out, src); err != nil {
		return nil, "", "", err
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, "", "", err
	}
	layer, err := b.cfg.layerOf([]tarFile{
		{name: "usr/local", dir: true, mode: 0o755},
		{name: "usr/local/bin", dir: true, mode: 0o755},
		{name: "usr/local/bin/nnp", mode: 0o4755, data: data},
	})
	if err != nil {
		return nil, "", "", err
	}
	img, err := imageOf(v1.Config{Cmd: []string{"nnp"}, Env: []string{imagePath}}, b.busyboxLayer, layer)
	return img, "", "nnp built from the pinned release's source, setuid root over busybox (upstream: over Alpine)", err
}

// webserverBuilder makes kitten or nautilus: agnhost's test-webserver with the image's
// picture and data.json at the root, as upstream's Dockerfile does. Upstream's base is
// agnhost on Alpine, whose /etc/os-release the image volume test reads: the stand-in
// carries an os-release naming Alpine, marked as the harness's.
func webserverBuilder(image string) imageBuilder {
	return func(_ context.Context, b *baseImages, _ string) (v1.Image, string, string, error) {
		html := filepath.Join(b.kubeSrc, "test/images", image, "html")
		var files []tarFile
		for _, f := range []string{image + ".jpg", "data.json"} {
			data, err := os.ReadFile(filepath.Join(html, f))
			if err != nil {
				return nil, "", "", err
			}
			files = append(files, tarFile{name: f, mode: 0o644, data: data})
		}
		osRelease := "# nodeagent harness stand-in: upstream's image is built on agnhost, whose base is Alpine Linux; this one's is busybox.\n" +
			"NAME=\"Alpine Linux\"\nID=alpine\nPRETTY_NAME=\"Alpine Linux (nodeagent harness stand-in)\"\n"
		files = append(files, tarFile{name: "etc/os-release", mode: 0o644, data: []byte(osRelease)})
		layer, err := b.cfg.layerOf(files)
		if err != nil {
			return nil, "", "", err
		}
		img, err := imageOf(agnhostConfig([]string{"test-webserver"}), append(append([]v1.Layer{}, b.agnhostLayers...), layer)...)
		return img, "agnhost's test-webserver with upstream's " + image + " files; its /etc/os-release names Alpine as upstream's base does, over busybox", "", err
	}
}

// PushConformanceImages builds every image among refs (as `e2e.test --list-images` prints
// them with ConformanceRepoList) that the harness knows how to make, pushes each to the
// local registry under that name, and returns what it pushed and the refs it cannot
// provide. Run it after Up: the registry must be serving.
func (c *Config) PushConformanceImages(ctx context.Context, upstreamBin string, refs []string, extra bool) (pushed []ConformanceImage, missing []string, err error) {
	b, err := c.buildBaseImages(ctx, upstreamBin)
	if err != nil {
		return nil, nil, err
	}
	b.extra = extra
	for _, refStr := range refs {
		repo, tag, ok := localRepoTag(refStr)
		build := conformanceBuilders[repo]
		if !ok || build == nil {
			missing = append(missing, refStr)
			continue
		}
		img, standIn, note, err := build(ctx, b, tag)
		if errors.Is(err, errNotThisRun) {
			missing = append(missing, refStr)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("image %s: %w", refStr, err)
		}
		if err := pushImage(ctx, refStr, img); err != nil {
			return nil, nil, err
		}
		pushed = append(pushed, ConformanceImage{Ref: refStr, StandIn: standIn, Note: note})
	}
	sort.Slice(pushed, func(i, j int) bool { return pushed[i].Ref < pushed[j].Ref })
	sort.Strings(missing)
	return pushed, missing, nil
}

// localRepoTag splits a reference to the open local registry into its repository path and
// tag; ok is false for any other registry.
func localRepoTag(refStr string) (repo, tag string, ok bool) {
	ref, err := name.NewTag(refStr, name.Insecure)
	if err != nil || ref.RegistryStr() != RegistryAddr {
		return "", "", false
	}
	return ref.RepositoryStr(), ref.TagStr(), true
}
