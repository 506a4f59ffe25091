package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/poddir"
)

// SubPathRequest names one volumeMount with a subPath.
type SubPathRequest struct {
	// PodUID is the pod's UID.
	PodUID types.UID
	// Volume is the volume's name; VolumePath its Mount.HostPath.
	Volume     string
	VolumePath string
	// Container and MountIndex (the volumeMount's index in the
	// container) make the bind target unique, like the kubelet's.
	Container  string
	MountIndex int
	// SubPath is the volumeMount's subPath, subPathExpr already expanded.
	SubPath string
}

// PrepareSubPath resolves SubPath inside the volume without ever leaving
// it, creating missing directories, and bind-mounts the opened file
// descriptor (never the path again) on
// pods/<uid>/volume-subpaths/<volume>/<container>/<index>. The container
// binds the returned path. A symlink swapped in during the call cannot
// redirect the mount: the kernel resolves the path once, beneath the
// volume (openat2 RESOLVE_BENEATH), and the mount takes that file
// (CVE-2017-1002101, CVE-2021-25741). Idempotent: an existing bind is kept.
func (m *Manager) PrepareSubPath(ctx context.Context, req SubPathRequest) (string, error) {
	if !poddir.ValidUID(req.PodUID) {
		return "", fmt.Errorf("invalid pod UID %q", req.PodUID)
	}
	if err := validateSubPath(req.SubPath); err != nil {
		return "", err
	}
	for _, name := range []string{req.Volume, req.Container} {
		if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
			return "", fmt.Errorf("subPath: invalid volume or container name %q", name)
		}
	}
	unlock := m.lockPod(req.PodUID)
	defer unlock()

	target := m.layout.Pod(req.PodUID).SubPath(req.Volume, req.Container, req.MountIndex)
	mps, err := m.mounter.mountPoints(target)
	if err != nil {
		return "", err
	}
	if _, ok := findMount(mps, target); ok {
		return target, nil
	}

	fd, err := openBeneath(req.VolumePath, req.SubPath)
	if err != nil {
		return "", fmt.Errorf("subPath %q of volume %q: %w", req.SubPath, req.Volume, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("subPath %q: %w", req.SubPath, err)
	}
	if err := os.MkdirAll(filepath.Dir(target), poddir.DirMode); err != nil {
		return "", fmt.Errorf("subPath target: %w", err)
	}
	if err := makeMountTarget(target, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
		return "", err
	}
	source := fmt.Sprintf("/proc/self/fd/%d", fd)
	if err := m.mounter.mount(source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		_ = os.Remove(target)
		return "", fmt.Errorf("subPath %q of volume %q: %w", req.SubPath, req.Volume, err)
	}
	klog.FromContext(ctx).V(4).Info("SubPath bound", "podUID", req.PodUID, "volume", req.Volume, "subPath", req.SubPath, "target", target)
	return target, nil
}

func validateSubPath(p string) error {
	if p == "" || filepath.IsAbs(p) {
		return fmt.Errorf("subPath %q must be a non-empty relative path", p)
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return fmt.Errorf("subPath %q must not contain '..'", p)
		}
	}
	return nil
}

// makeMountTarget creates an empty directory or file to mount on; an
// existing entry of the wrong kind (left by a crash) is replaced.
func makeMountTarget(target string, dir bool) error {
	fi, err := os.Lstat(target)
	if err == nil && fi.IsDir() == dir && fi.Mode()&os.ModeSymlink == 0 {
		return nil
	}
	if err == nil {
		if err := os.Remove(target); err != nil {
			return fmt.Errorf("subPath target: %w", err)
		}
	}
	if dir {
		err = os.Mkdir(target, 0o750)
	} else {
		var f *os.File
		f, err = os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_RDONLY|unix.O_NOFOLLOW, 0o640)
		if err == nil {
			err = f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("subPath target: %w", err)
	}
	return nil
}

// openBeneath opens rel inside root as an O_PATH descriptor. Symlinks
// that stay inside root are followed; anything that would leave it fails
// with EXDEV. Missing directories are created one at a time, each opened
// again beneath its parent with no symlink allowed, and each given the
// mode of root, as the kubelet gives them: an emptyDir (0777, and with an
// fsGroup setgid: 2777) lends every container user of the pod the
// directories made in it.
func openBeneath(root, rel string) (int, error) {
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open volume: %w", err)
	}
	defer unix.Close(rootFd)
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(rootFd, rel, how)
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("path escapes the volume")
	case errors.Is(err, unix.ENOSYS):
		return -1, fmt.Errorf("the kernel lacks openat2 (Linux 5.6+), needed for safe subPath mounts")
	case !errors.Is(err, unix.ENOENT):
		return -1, err
	}
	return makeDirsBeneath(rootFd, rel)
}

func makeDirsBeneath(rootFd int, rel string) (int, error) {
	strict := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	var root unix.Stat_t
	if err := unix.Fstat(rootFd, &root); err != nil {
		return -1, fmt.Errorf("stat volume: %w", err)
	}
	// Every directory made gets root's permission bits, setuid, setgid and
	// sticky included, whatever the umask.
	mode := root.Mode & 0o7777
	cur, err := unix.Dup(rootFd)
	if err != nil {
		return -1, err
	}
	for _, elem := range strings.Split(filepath.Clean(rel), "/") {
		if elem == "." {
			continue
		}
		next, err := unix.Openat2(cur, elem, strict)
		if errors.Is(err, unix.ENOENT) {
			// An O_PATH descriptor is a valid dirfd for mkdirat.
			created := false
			if err = unix.Mkdirat(cur, elem, mode&0o777); err == nil || errors.Is(err, unix.EEXIST) {
				created = err == nil
				next, err = unix.Openat2(cur, elem, strict)
			}
			if err == nil && created {
				// fchmod refuses an O_PATH descriptor; its /proc link names
				// the very directory just made, whatever happens to the path.
				if err = unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", next), mode); err != nil {
					unix.Close(next)
				}
			}
		}
		unix.Close(cur)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
				return -1, fmt.Errorf("path escapes the volume")
			}
			return -1, fmt.Errorf("create %q: %w", elem, err)
		}
		cur = next
	}
	return cur, nil
}
