package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// loopMajor is the block major number of loop devices.
const loopMajor = 7

// sysLoops attaches files to loop devices with the kernel's ioctls (loop(4)); the
// driver's image has no losetup.
type sysLoops struct {
	// dev and sys are /dev and /sys/block; tests never change them, but naming them keeps
	// the paths in one place.
	dev, sys string
}

var _ loopDevices = sysLoops{}

func newSysLoops() sysLoops { return sysLoops{dev: "/dev", sys: "/sys/block"} }

// Attach binds file to a free loop device and returns the device's path. Another process
// may take the free device between LOOP_CTL_GET_FREE and the bind: then it asks again.
func (l sysLoops) Attach(file string) (string, error) {
	ctl, err := os.OpenFile(filepath.Join(l.dev, "loop-control"), os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("loop control: %w", err)
	}
	defer ctl.Close()
	backing, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer backing.Close()
	for range 8 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev, err := l.node(n)
		if err != nil {
			return "", err
		}
		err = bindLoop(dev, backing, file)
		if errors.Is(err, unix.EBUSY) {
			continue
		}
		if err != nil {
			return "", err
		}
		return dev, nil
	}
	return "", fmt.Errorf("attach %s: every free loop device was taken before it could be bound", file)
}

// node returns the path of loop device n, making the device node when /dev lacks it
// (a container's /dev that is not devtmpfs).
func (l sysLoops) node(n int) (string, error) {
	dev := filepath.Join(l.dev, "loop"+strconv.Itoa(n))
	if _, err := os.Stat(dev); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(loopMajor, uint32(n)))); err != nil && !errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("mknod %s: %w", dev, err)
		}
	}
	return dev, nil
}

// bindLoop binds backing to the loop device dev, with its name recorded for losetup -l.
// LOOP_CONFIGURE does it in one step (Linux 5.8); older kernels get LOOP_SET_FD and
// LOOP_SET_STATUS64.
func bindLoop(dev string, backing *os.File, name string) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var info unix.LoopInfo64
	copy(info.File_name[:len(info.File_name)-1], name)
	err = unix.IoctlLoopConfigure(int(f.Fd()), &unix.LoopConfig{Fd: uint32(backing.Fd()), Info: info})
	if !errors.Is(err, unix.ENOTTY) && !errors.Is(err, unix.EINVAL) {
		if err != nil {
			return fmt.Errorf("LOOP_CONFIGURE %s: %w", dev, err)
		}
		return nil
	}
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_SET_FD, int(backing.Fd())); err != nil {
		return fmt.Errorf("LOOP_SET_FD %s: %w", dev, err)
	}
	if err := unix.IoctlLoopSetStatus64(int(f.Fd()), &info); err != nil {
		_ = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
		return fmt.Errorf("LOOP_SET_STATUS64 %s: %w", dev, err)
	}
	return nil
}

// Detach unbinds the loop device; one that is bound to nothing is already detached. A
// device still open elsewhere detaches when its last user closes it.
func (l sysLoops) Detach(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("LOOP_CLR_FD %s: %w", dev, err)
	}
	return nil
}

// Find returns the loop device bound to file, "" if none: sysfs shows each bound
// device's backing file (as seen from this process's root).
func (l sysLoops) Find(file string) (string, error) {
	entries, err := os.ReadDir(l.sys)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "loop") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(l.sys, e.Name(), "loop", "backing_file"))
		if err != nil {
			continue // not bound
		}
		if strings.TrimSuffix(string(data), "\n") == file {
			return filepath.Join(l.dev, e.Name()), nil
		}
	}
	return "", nil
}

// Resize tells the loop device that its backing file changed size (LOOP_SET_CAPACITY).
func (l sysLoops) Resize(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_SET_CAPACITY, 0); err != nil {
		return fmt.Errorf("LOOP_SET_CAPACITY %s: %w", dev, err)
	}
	return nil
}
