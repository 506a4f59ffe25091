package hostpath

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sysMounter makes real bind mounts with mount(2); the driver's image has no mount binary.
type sysMounter struct{}

var _ mounter = sysMounter{}

// optionFlags maps the options bindOptions returns to mount(2) flags.
var optionFlags = map[string]uintptr{"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC}

// Bind bind-mounts source onto target. Options need a second, remounting call: the kernel
// ignores them on the bind itself.
func (sysMounter) Bind(source, target string, options []string) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", source, target, err)
	}
	if len(options) == 0 {
		return nil
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT)
	for _, o := range options {
		flags |= optionFlags[o]
	}
	// A remount must keep the flags the mount it came from has, or the kernel refuses
	// it where they are locked (in a user namespace).
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
		return fmt.Errorf("remount %s with %s: %w", target, strings.Join(options, ","), err)
	}
	return nil
}

// Unmount unmounts every mount stacked on target; a target that is no mount point, or
// does not exist, is already unmounted.
func (m sysMounter) Unmount(target string) error {
	for range 16 {
		err := unix.Unmount(target, 0)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
		if mounted, err := m.IsMountPoint(target); err != nil || !mounted {
			return err
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", target)
}

// IsMountPoint says whether path is the mount point of a mount of this mount namespace.
func (sysMounter) IsMountPoint(path string) (bool, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	points, err := mountPoints(f)
	if err != nil {
		return false, err
	}
	for _, p := range points {
		if p == resolved {
			return true, nil
		}
	}
	return false, nil
}

// mountPoints returns the mount points listed in a mountinfo file (proc(5)), unescaped.
func mountPoints(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			return nil, fmt.Errorf("malformed mountinfo line %q", sc.Text())
		}
		out = append(out, unescapeOctal(fields[4]))
	}
	return out, sc.Err()
}

// unescapeOctal undoes the kernel's \NNN escapes of space, tab, newline and backslash.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
