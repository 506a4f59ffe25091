package mountpod

import (
	"errors"
	"fmt"
	"os"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// sysMounter makes real bind mounts with mount(2); the driver's image has no mount binary
// of its own to rely on.
type sysMounter struct{}

var _ mounter = sysMounter{}

// Bind bind-mounts source onto target. Read-only needs a second, remounting call: the
// kernel ignores flags on the bind itself. The remount keeps the nosuid, nodev and noexec
// the mount already has, which the kernel may have locked.
func (sysMounter) Bind(source, target string, readOnly bool) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", source, target, err)
	}
	if !readOnly {
		return nil
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err == nil {
		for bit, ms := range map[int64]uintptr{unix.ST_NOSUID: unix.MS_NOSUID, unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC} {
			if int64(st.Flags)&bit != 0 {
				flags |= ms
			}
		}
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		_ = unix.Unmount(target, 0)
		return fmt.Errorf("remount %s read-only: %w", target, err)
	}
	return nil
}

// Unmount unmounts every mount stacked on target.
func (m sysMounter) Unmount(target string) error {
	for range 16 {
		mounted, err := m.IsMountPoint(target)
		if err != nil || !mounted {
			return err
		}
		if err := unix.Unmount(target, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", target)
}

// IsMountPoint says whether path is a mount point in this mount namespace.
func (sysMounter) IsMountPoint(path string) (bool, error) {
	ok, err := mountinfo.Mounted(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return ok, err
}
