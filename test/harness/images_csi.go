package harness

import (
	"context"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
// makes their images; bbLayer is the busybox root file system. Built as make test's unit
// tests build the module's packages (no -trimpath, no cgo), so that on a fresh machine
// their build finds the client libraries compiled (about 20 packages instead of 265).
func (c *Config) buildCSIImages(ctx context.Context, bbLayer v1.Layer) (map[string]v1.Image, error) {
	out := c.imageBinPath("csi")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	p := c.startQuietBuild("CSI test images", "csi-hostpath", "csi-mountpod", "csi-registrar")
	err := runBuild(ctx, c.RepoDir, []string{"CGO_ENABLED=0"}, p, "go", "build", "-v", "-ldflags", "-s -w", "-o", out+"/",
		"./test/images/csi-hostpath", "./test/images/csi-mountpod", "./test/images/csi-registrar")
	p.end(err)
	if err != nil {
		return nil, err
	}
	single := func(bin string, under ...v1.Layer) (v1.Image, error) {
		data, err := os.ReadFile(filepath.Join(out, bin))
		if err != nil {
			return nil, err
		}
		l, err := c.layerOf([]tarFile{{name: bin, mode: 0o755, data: data}})
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

// csiSidecarImages builds (or finds cached) the CSI sidecars and makes an image of each: the
// static binary alone, as upstream's images are made FROM a distroless base. A binary's
// layer is compressed once and kept beside it in the cache, so that a cached make up only
// copies it to the registry.
func (c *Config) csiSidecarImages(ctx context.Context) (map[string]v1.Image, error) {
	bins, err := c.EnsureCSISidecars(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]v1.Image{}
	for path, bin := range bins {
		l, err := cachedBinaryLayer(bin)
		if err != nil {
			return nil, err
		}
		img, err := imageOf(v1.Config{Entrypoint: []string{"/" + filepath.Base(bin)}, Env: []string{imagePath}}, l)
		if err != nil {
			return nil, err
		}
		out[path] = img
	}
	return out, nil
}

// cachedBinaryLayer is a layer holding the binary at bin as /<its name>, compressed into
// <bin>.layer.tar.gz the first time.
func cachedBinaryLayer(bin string) (v1.Layer, error) {
	return cachedLayer(bin+".layer.tar.gz", func() ([]tarFile, error) {
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		return []tarFile{{name: filepath.Base(bin), mode: 0o755, data: data}}, nil
	})
}

// cachedLayer is the layer compressed at gz, made of the files that files returns and
// written there the first time.
func cachedLayer(gz string, files func() ([]tarFile, error)) (v1.Layer, error) {
	if _, err := os.Stat(gz); err == nil {
		return tarball.LayerFromFile(gz)
	}
	fs, err := files()
	if err != nil {
		return nil, err
	}
	data, err := tarOf(fs)
	if err != nil {
		return nil, err
	}
	if err := storeCompressed(gz, data); err != nil {
		return nil, err
	}
	return tarball.LayerFromFile(gz)
}
