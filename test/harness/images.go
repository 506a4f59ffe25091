package harness

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Image names as the tests and users write them. containerd resolves registry.k8s.io and
// docker.io through the local registry (see registryHosts).
var (
	PauseImage      = "registry.k8s.io/pause:" + PauseTag
	BusyboxE2EImage = "registry.k8s.io/e2e-test-images/busybox:" + BusyboxE2ETag
	AgnhostImage    = "registry.k8s.io/e2e-test-images/agnhost:" + AgnhostTag
	BusyboxImage    = "docker.io/library/busybox:1.37"
)

// Images lists every image the harness puts into the runtime.
func Images() []string { return []string{PauseImage, BusyboxE2EImage, AgnhostImage, BusyboxImage} }

const imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// tarFile is one entry of a layer.
type tarFile struct {
	name     string
	mode     int64
	data     []byte // regular file content
	linkname string // symlink target when set
	dir      bool
	uid, gid int
	xattrs   map[string]string // extended attributes, e.g. security.capability
}

// tarOf is the tar of files as a layer holds them: owners and modes as given, every time
// the epoch, so that the same files make the same layer.
func tarOf(files []tarFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		for k, v := range f.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		case f.linkname != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.linkname
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layerKeep is how long a compressed layer nothing asked for stays in the layer store.
const layerKeep = 7 * 24 * time.Hour

// layerOf is the layer of files. It is compressed once per content into the cache's layer
// store (<cache>/layers/<sha256 of the tar>.tar.gz) and taken from there afterwards: a
// layer made from a tar is compressed again for its digest and for each push, which cost
// every cluster's bring-up seconds of CPU for agnhost's and the project's images.
// Layers unused for layerKeep are removed when a new one is stored. Without a cache dir
// the layer is compressed as it goes.
func (c *Config) layerOf(files []tarFile) (v1.Layer, error) {
	data, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	if c.CacheDir == "" {
		return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	}
	dir := filepath.Join(c.CacheDir, "layers")
	sum := sha256.Sum256(data)
	gz := filepath.Join(dir, hex.EncodeToString(sum[:])+".tar.gz")
	if _, err := os.Stat(gz); err == nil {
		now := time.Now()
		_ = os.Chtimes(gz, now, now) // used: kept another layerKeep
		return tarball.LayerFromFile(gz)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pruneLayers(dir, time.Now().Add(-layerKeep))
	if err := storeCompressed(gz, data); err != nil {
		return nil, err
	}
	return tarball.LayerFromFile(gz)
}

// storeCompressed writes data gzip-compressed to path, through a file of its own beside it:
// two harness processes may store the same layer at once.
func storeCompressed(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".layer-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	zw := gzip.NewWriter(f)
	if _, err := zw.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// pruneLayers removes the stored layers last used before cutoff, and what a store cut
// short left.
func pruneLayers(dir string, cutoff time.Time) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			continue
		}
		if strings.HasSuffix(e.Name(), ".tar.gz") || strings.HasPrefix(e.Name(), ".layer-") {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func imageOf(cfg v1.Config, layers ...v1.Layer) (v1.Image, error) {
	base, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: runtime.GOARCH, OS: "linux", Config: cfg, RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(base, layers...)
}

// busyboxLayer holds a static busybox (Config.BusyboxBinary) with a link for every applet,
// and the few files a base image has.
func (c *Config) busyboxLayer(ctx context.Context, bbPath string) (v1.Layer, error) {
	const bb = "/bin/busybox"
	data, err := os.ReadFile(bbPath)
	if err != nil {
		return nil, fmt.Errorf("busybox: %w", err)
	}
	list, err := exec.CommandContext(ctx, bbPath, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list-full: %w", err)
	}
	files := []tarFile{}
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root", "home", "var", "var/spool", "var/spool/mail", "dev", "proc", "sys"} {
		files = append(files, tarFile{name: d, dir: true, mode: 0o755})
	}
	files = append(files,
		tarFile{name: "tmp", dir: true, mode: 0o1777},
		tarFile{name: "bin/busybox", mode: 0o755, data: data},
		tarFile{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")},
		tarFile{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\n")},
	)
	// Links at busybox's own paths, and every applet in /bin too, as in the Docker
	// library's busybox image that upstream's e2e busybox starts from (tests run
	// /bin/sysctl).
	linked := map[string]bool{"bin/busybox": true}
	link := func(name string) {
		if !linked[name] {
			linked[name] = true
			files = append(files, tarFile{name: name, mode: 0o777, linkname: bb})
		}
	}
	applets := strings.Fields(string(list))
	for _, applet := range applets {
		if strings.Count(applet, "/") > 0 {
			link(applet)
		}
	}
	for _, applet := range applets {
		link("bin/" + filepath.Base(applet))
	}
	return c.layerOf(files)
}

// agnhostTools are the programs upstream's agnhost image installs from Alpine's packages
// over busybox and that the e2e tests run inside it (curl in lifecycle hooks, bash in
// probes, OpenBSD netcat's `nc -v -t -w 2` in the Service reachability checks, dig and
// getent in the DNS queriers): copied from this machine with the shared libraries they
// load. Each lands before busybox's applet of the same name in PATH.
var agnhostTools = map[string]string{
	"usr/bin/curl":   "/usr/bin/curl",
	"bin/bash":       "/bin/bash",
	"usr/bin/nc":     "/bin/nc.openbsd",
	"usr/bin/dig":    "/usr/bin/dig",
	"usr/bin/getent": "/usr/bin/getent",
}

// dnsTools are what upstream's glibc-dns-testing image has over its Debian base for the
// DNS specs' glibc querier: dig (dnsutils) and glibc's getent.
var dnsTools = map[string]string{
	"usr/bin/dig":    "/usr/bin/dig",
	"usr/bin/getent": "/usr/bin/getent",
}

// nsswitchConf is glibc's name service order for hosts, as Debian ships it: /etc/hosts first.
var nsswitchConf = tarFile{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")}

// agnhostLayer adds what the agnhost image has over its base (see upstream's
// test/images/agnhost/Dockerfile): the binary and its agnhost-2 link, the porter's
// certificate, the upload dir, the user and group the e2e tests look for, and curl and bash.
func (c *Config) agnhostLayer(ctx context.Context, bin, srcDir string) (v1.Layer, error) {
	data, err := os.ReadFile(filepath.Join(bin, "agnhost"))
	if err != nil {
		return nil, err
	}
	tools, err := hostToolFiles(ctx, agnhostTools)
	if err != nil {
		return nil, err
	}
	files := append(tools, []tarFile{
		nsswitchConf,
		{name: "agnhost", mode: 0o755, data: data},
		{name: "agnhost-2", mode: 0o777, linkname: "agnhost"},
		{name: "uploads", dir: true, mode: 0o755},
		{name: "home/user-defined-in-image", dir: true, mode: 0o755, uid: 1000, gid: 1000},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")},
	}...)
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		b, err := os.ReadFile(filepath.Join(srcDir, "test/images/agnhost/porter", f))
		if err != nil {
			return nil, err
		}
		files = append(files, tarFile{name: f, mode: 0o644, data: b})
	}
	return c.layerOf(files)
}

// imageBinPath is where the project's image commands are built, under the cache: the go
// tool leaves a binary that is up to date as it is, so a cluster's bring-up links them
// again only after their sources changed.
func (c *Config) imageBinPath(elem ...string) string {
	return filepath.Join(append([]string{c.CacheDir, "images"}, elem...)...)
}

// buildPause compiles test/images/pause statically.
func (c *Config) buildPause(ctx context.Context) ([]byte, error) {
	out := c.imageBinPath("pause")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	p := c.startQuietBuild("pause image", "pause")
	err := runBuild(ctx, c.RepoDir, []string{"CGO_ENABLED=0"}, p, "go", "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", out, "./test/images/pause")
	p.end(err)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// baseImages are the images the harness builds itself, and the layers other test images
// are made of.
type baseImages struct {
	pause, busybox, agnhost v1.Image
	busyboxLayer            v1.Layer // a busybox root file system
	agnhostLayers           []v1.Layer
	kubeSrc                 string // the source of k8s.io/kubernetes at the pinned release
	kubeVersion             string // the pinned release, v1.x.y
	upstreamBin             string // the upstream binaries (etcd among them)
	cfg                     *Config
	// extra is set unless the run is the smoke one: images that take a build of their own
	// (minutes on a fresh machine) are made only then.
	extra bool
}

// buildBaseImages builds pause, busybox and agnhost.
func (c *Config) buildBaseImages(ctx context.Context, upstreamBin string) (*baseImages, error) {
	version, mod, err := c.kubernetesModule(ctx)
	if err != nil {
		return nil, err
	}
	pauseBin, err := c.buildPause(ctx)
	if err != nil {
		return nil, err
	}
	pauseLayer, err := c.layerOf([]tarFile{{name: "pause", mode: 0o755, data: pauseBin}})
	if err != nil {
		return nil, err
	}
	bbLayer, err := c.busyboxLayer(ctx, c.BusyboxBinary)
	if err != nil {
		return nil, err
	}
	agnLayer, err := c.agnhostLayer(ctx, upstreamBin, mod.Dir)
	if err != nil {
		return nil, err
	}
	b := &baseImages{busyboxLayer: bbLayer, agnhostLayers: []v1.Layer{bbLayer, agnLayer}, kubeSrc: mod.Dir,
		kubeVersion: version, upstreamBin: upstreamBin, cfg: c}
	if b.pause, err = imageOf(v1.Config{Entrypoint: []string{"/pause"}, Env: []string{imagePath}}, pauseLayer); err != nil {
		return nil, err
	}
	if b.busybox, err = imageOf(v1.Config{Cmd: []string{"sh"}, Env: []string{imagePath}}, bbLayer); err != nil {
		return nil, err
	}
	if b.agnhost, err = imageOf(agnhostConfig([]string{"pause"}), b.agnhostLayers...); err != nil {
		return nil, err
	}
	return b, nil
}

// agnhostConfig is the configuration of upstream's agnhost image with the given CMD.
func agnhostConfig(cmd []string) v1.Config {
	return v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: cmd, Env: []string{imagePath},
		ExposedPorts: map[string]struct{}{"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}}
}

// pushImages builds pause, busybox and agnhost and pushes them to the local registry under
// the paths their public names map to, the project's CSI images under nodeagent/, the
// CSI sidecars under sig-storage/ when the cluster gets the hostpath driver, and CoreDNS
// under coredns/ when it gets Services.
func (c *Config) pushImages(ctx context.Context, upstreamBin string) error {
	b, err := c.buildBaseImages(ctx, upstreamBin)
	if err != nil {
		return err
	}
	pushes := map[string]v1.Image{
		"pause:" + PauseTag:                        b.pause,
		"e2e-test-images/busybox:" + BusyboxE2ETag: b.busybox,
		"e2e-test-images/agnhost:" + AgnhostTag:    b.agnhost,
		"library/busybox:1.37":                     b.busybox,
		"library/busybox:latest":                   b.busybox,
	}
	csi, err := c.buildCSIImages(ctx, b.busyboxLayer)
	if err != nil {
		return err
	}
	for path, img := range csi {
		pushes[path] = img
	}
	// The sidecars before CoreDNS (both built with the upstream build's versions of what
	// they share with it: modalign.go).
	if c.CSIHostpath {
		sidecars, err := c.csiSidecarImages(ctx)
		if err != nil {
			return err
		}
		for path, img := range sidecars {
			pushes[path] = img
		}
	}
	if c.Services {
		img, err := c.coreDNSImage(ctx)
		if err != nil {
			return err
		}
		pushes[coreDNSPath] = img
	}
	// All at once: shared layers go up once, and the sidecars' large ones beside the rest.
	todo := map[name.Reference]remote.Taggable{}
	for path, img := range pushes {
		ref, err := name.ParseReference(RegistryAddr+"/"+path, name.Insecure)
		if err != nil {
			return err
		}
		todo[ref] = img
	}
	if err := remote.MultiWrite(todo, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push images to %s: %w", RegistryAddr, err)
	}
	return nil
}

func pushImage(ctx context.Context, refStr string, img v1.Image) error {
	ref, err := name.ParseReference(refStr, name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// pullImages pulls every harness image into the runtime through CRI, the way a node would.
func (c *Config) pullImages(ctx context.Context) error {
	_, img, closeFn, err := c.CRI(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	for _, ref := range Images() {
		if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
			return fmt.Errorf("pull %s into the runtime: %w", ref, err)
		}
	}
	return nil
}
