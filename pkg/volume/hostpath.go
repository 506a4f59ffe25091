package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

const hostPathPluginName = "kubernetes.io/host-path"

// hostPathPlugin hands a host path to containers as is. Nothing is created
// in the pod directory; the type check is the whole setUp.
type hostPathPlugin struct{}

var _ plugin = hostPathPlugin{}

func (hostPathPlugin) name() string { return hostPathPluginName }

func (hostPathPlugin) canSupport(vol *v1.Volume) bool { return vol.HostPath != nil }

func (p hostPathPlugin) setUp(_ context.Context, req *setUpRequest) (Mount, error) {
	path := req.vol.HostPath.Path
	if !filepath.IsAbs(path) {
		return Mount{}, fmt.Errorf("invalid HostPath %q: must be an absolute path", path)
	}
	for _, elem := range strings.Split(path, "/") {
		if elem == ".." {
			return Mount{}, fmt.Errorf("invalid HostPath %q: must not contain '..'", path)
		}
	}
	var pathType v1.HostPathType
	if req.vol.HostPath.Type != nil {
		pathType = *req.vol.HostPath.Type
	}
	if err := checkHostPathType(path, pathType); err != nil {
		return Mount{}, err
	}
	return Mount{HostPath: path, Plugin: p.name()}, nil
}

// tearDown has nothing to do: the host path belongs to the host.
func (hostPathPlugin) tearDown(context.Context, string) error { return nil }

// hostFileType names what is at path, following symlinks like the bind
// mount will, in the kubelet's words.
func hostFileType(path string) (v1.HostPathType, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	switch m := fi.Mode(); {
	case m.IsDir():
		return v1.HostPathDirectory, nil
	case m.IsRegular():
		return v1.HostPathFile, nil
	case m&fs.ModeSocket != 0:
		return v1.HostPathSocket, nil
	case m&fs.ModeCharDevice != 0:
		return v1.HostPathCharDev, nil
	case m&fs.ModeDevice != 0:
		return v1.HostPathBlockDev, nil
	}
	return "", fmt.Errorf("only recognise file, directory, socket, block device and character device")
}

// checkHostPathType enforces the volume's type, creating the directory or
// file for the *OrCreate types.
func checkHostPathType(path string, pathType v1.HostPathType) error {
	var want v1.HostPathType
	var noun string
	switch pathType {
	case v1.HostPathUnset:
		return nil
	case v1.HostPathDirectoryOrCreate:
		if err := createIfMissing(path, func() error { return os.MkdirAll(path, 0o755) }); err != nil {
			return err
		}
		want, noun = v1.HostPathDirectory, "directory"
	case v1.HostPathDirectory:
		want, noun = v1.HostPathDirectory, "directory"
	case v1.HostPathFileOrCreate:
		if err := createIfMissing(path, func() error { return createFile(path) }); err != nil {
			return err
		}
		want, noun = v1.HostPathFile, "file"
	case v1.HostPathFile:
		want, noun = v1.HostPathFile, "file"
	case v1.HostPathSocket:
		want, noun = v1.HostPathSocket, "socket file"
	case v1.HostPathCharDev:
		want, noun = v1.HostPathCharDev, "character device"
	case v1.HostPathBlockDev:
		want, noun = v1.HostPathBlockDev, "block device"
	default:
		return fmt.Errorf("%s is an invalid volume type", pathType)
	}
	// The kubelet's words, whether the path is missing or of another type.
	if got, err := hostFileType(path); err != nil || got != want {
		return fmt.Errorf("hostPath type check failed: %s is not a %s", path, noun)
	}
	return nil
}

func createIfMissing(path string, create func() error) error {
	if _, err := os.Stat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := create(); err != nil {
		return fmt.Errorf("hostPath create %s: %w", path, err)
	}
	return nil
}

func createFile(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
