package harness

import (
	"archive/tar"
	"bytes"
	"context"
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
}

func layerOf(files []tarFile) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
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
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
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

// busyboxLayer holds Debian's static busybox with a link for every applet, and the few
// files a base image has.
func busyboxLayer(ctx context.Context) (v1.Layer, error) {
	const bb = "/bin/busybox"
	data, err := os.ReadFile(bb)
	if err != nil {
		return nil, fmt.Errorf("busybox-static: %w", err)
	}
	list, err := exec.CommandContext(ctx, bb, "--list-full").Output()
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
	for _, applet := range strings.Fields(string(list)) {
		if applet == "bin/busybox" || strings.Count(applet, "/") == 0 {
			continue
		}
		files = append(files, tarFile{name: applet, mode: 0o777, linkname: bb})
	}
	return layerOf(files)
}

// agnhostLayer adds what the agnhost image has over its base: the binary, the porter's
// certificate, the upload dir, and the user and group the e2e tests look for.
func agnhostLayer(bin, srcDir string) (v1.Layer, error) {
	data, err := os.ReadFile(filepath.Join(bin, "agnhost"))
	if err != nil {
		return nil, err
	}
	files := []tarFile{
		{name: "agnhost", mode: 0o755, data: data},
		{name: "agnhost-2", mode: 0o777, linkname: "agnhost"},
		{name: "uploads", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")},
	}
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		b, err := os.ReadFile(filepath.Join(srcDir, "test/images/agnhost/porter", f))
		if err != nil {
			return nil, err
		}
		files = append(files, tarFile{name: f, mode: 0o644, data: b})
	}
	return layerOf(files)
}

// buildPause compiles test/images/pause statically.
func (c *Config) buildPause(ctx context.Context) ([]byte, error) {
	out := c.path("images", "pause")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	if err := c.goCmd(ctx, c.RepoDir, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./test/images/pause"); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// pushImages builds pause, busybox and agnhost and pushes them to the local registry under
// the paths their public names map to.
func (c *Config) pushImages(ctx context.Context, upstreamBin string) error {
	version, err := KubeVersion(c.RepoDir)
	if err != nil {
		return err
	}
	mod, err := goModDownload(ctx, "k8s.io/kubernetes@"+version)
	if err != nil {
		return err
	}
	pauseBin, err := c.buildPause(ctx)
	if err != nil {
		return err
	}
	pauseLayer, err := layerOf([]tarFile{{name: "pause", mode: 0o755, data: pauseBin}})
	if err != nil {
		return err
	}
	bbLayer, err := busyboxLayer(ctx)
	if err != nil {
		return err
	}
	agnLayer, err := agnhostLayer(upstreamBin, mod.Dir)
	if err != nil {
		return err
	}
	pause, err := imageOf(v1.Config{Entrypoint: []string{"/pause"}, Env: []string{imagePath}}, pauseLayer)
	if err != nil {
		return err
	}
	busybox, err := imageOf(v1.Config{Cmd: []string{"sh"}, Env: []string{imagePath}}, bbLayer)
	if err != nil {
		return err
	}
	agnhost, err := imageOf(v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{imagePath},
		ExposedPorts: map[string]struct{}{"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}}, bbLayer, agnLayer)
	if err != nil {
		return err
	}
	pushes := map[string]v1.Image{
		"pause:" + PauseTag:                        pause,
		"e2e-test-images/busybox:" + BusyboxE2ETag: busybox,
		"e2e-test-images/agnhost:" + AgnhostTag:    agnhost,
		"library/busybox:1.37":                     busybox,
		"library/busybox:latest":                   busybox,
	}
	for path, img := range pushes {
		ref, err := name.ParseReference(RegistryAddr+"/"+path, name.Insecure)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
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
