package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// devIno names a file by its device and inode: a loop device reports its backing file so,
// whatever path the process that bound it saw it by.
type devIno struct{ dev, ino uint64 }

// detachLoopDevices unbinds every loop device whose backing file lies under dir: the
// block volumes of a CSI driver that ran in the cluster (the hostpath driver binds its
// volumes' files in its own mount namespace, so their paths in sysfs say nothing here).
// It runs after the unmounts, when nothing holds the devices open.
func detachLoopDevices(dir string) error {
	var bound []string
	entries, _ := os.ReadDir("/sys/block")
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join("/sys/block", e.Name(), "loop", "backing_file")); err == nil {
			bound = append(bound, filepath.Join("/dev", e.Name()))
		}
	}
	if len(bound) == 0 {
		return nil // the common case: no walk of the run dir
	}
	files := map[devIno]bool{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			files[devIno{dev: st.Dev, ino: st.Ino}] = true
		}
		return nil
	})
	var errs []error
	for _, dev := range bound {
		if err := detachLoopIfBacked(dev, files); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func detachLoopIfBacked(dev string, files map[devIno]bool) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return nil // gone, or not ours to open
	}
	defer f.Close()
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	if err != nil || !files[devIno{dev: info.Device, ino: info.Inode}] {
		return nil
	}
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	return nil
}
