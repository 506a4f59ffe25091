package harness

import (
	"context"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The project's CSI test images, pushed to the local registry by the harness and never
// pulled ahead: the hostpath driver of test/csi/hostpath and the mount-pod driver of
// test/csi/mountpod, over busybox so that tests can exec into them, and the registrar of
// test/csi/registrar on its own.
var (
	CSIHostpathImage  = RegistryAddr + "/" + csiHostpathPath
	CSIMountPodImage  = RegistryAddr + "/" + csiMountPodPath
	CSIRegistrarImage = RegistryAddr + "/" + csiRegistrarPath
)

const (
	csiHostpathPath  = "nodeagent/csi-hostpath:dev"
	csiMountPodPath  = "nodeagent/csi-mountpod:dev"
	csiRegistrarPath = "nodeagent/csi-registrar:dev"
)

// buildCSIImages compiles the drivers and the registrar statically, in one go build, and
// makes their images; bbLayer is the busybox root file system.
func (c *Config) buildCSIImages(ctx context.Context, bbLayer v1.Layer) (map[string]v1.Image, error) {
	out := c.path("images", "csi")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	if err := c.goCmd(ctx, c.RepoDir, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-ldflags", "-s -w", "-o", out+"/",
		"./test/images/csi-hostpath", "./test/images/csi-mountpod", "./test/images/csi-registrar"); err != nil {
		return nil, err
	}
	single := func(bin string, under ...v1.Layer) (v1.Image, error) {
		data, err := os.ReadFile(filepath.Join(out, bin))
		if err != nil {
			return nil, err
		}
		l, err := layerOf([]tarFile{{name: bin, mode: 0o755, data: data}})
		if err != nil {
			return nil, err
		}
		return imageOf(v1.Config{Entrypoint: []string{"/" + bin}, Env: []string{imagePath}}, append(under, l)...)
	}
	hostpath, err := single("csi-hostpath", bbLayer)
	if err != nil {
		return nil, err
	}
	mountPod, err := single("csi-mountpod", bbLayer)
	if err != nil {
		return nil, err
	}
	registrar, err := single("csi-registrar")
	if err != nil {
		return nil, err
	}
	return map[string]v1.Image{csiHostpathPath: hostpath, csiMountPodPath: mountPod, csiRegistrarPath: registrar}, nil
}
