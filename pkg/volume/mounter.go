package volume

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mounter is the seam between the plugins and the kernel's mount table;
// tests swap it for a fake.
type mounter interface {
	// mount calls mount(2).
	mount(source, target, fstype string, flags uintptr, data string) error
	// unmount calls umount2(2) without following a symlink at target.
	unmount(target string) error
	// mountPoints lists the current mounts at or below under, or all of
	// them when under is "".
	mountPoints(under string) ([]mountPoint, error)
	// mountedAt says whether a filesystem is mounted on dir, and which
	// ("tmpfs" or another name), without reading the whole mount table: a
	// pod's volume set-up asks once per volume, and the table grows with the
	// pods.
	mountedAt(dir string) (fstype string, mounted bool, err error)
}

// mountPoint is one line of /proc/self/mountinfo.
type mountPoint struct {
	path   string
	fstype string
	source string
	// superOpts are the filesystem's options (e.g. "rw,size=65536k").
	superOpts string
	// shared is true for a mount in a shared peer group ("shared:N").
	shared bool
}

// kernelMounter is the real mounter.
type kernelMounter struct {
	mountInfo string
}

var _ mounter = kernelMounter{}

func (kernelMounter) mount(source, target, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", source, target, fstype, err)
	}
	return nil
}

// mountedAt: dir is a mount point when its device differs from its
// parent's (true of every tmpfs, which has a device of its own); the
// filesystem's magic number tells a tmpfs.
func (kernelMounter) mountedAt(dir string) (string, bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", false, fmt.Errorf("stat %s: %w", dir, err)
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return "", false, fmt.Errorf("stat %s: %w", filepath.Dir(dir), err)
	}
	if st.Dev == parent.Dev {
		return "", false, nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return "", false, fmt.Errorf("statfs %s: %w", dir, err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		return "tmpfs", true, nil
	}
	return fmt.Sprintf("a filesystem of type 0x%x", fs.Type), true, nil
}

func (kernelMounter) unmount(target string) error {
	err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}

func (k kernelMounter) mountPoints(under string) ([]mountPoint, error) {
	path := k.mountInfo
	if path == "" {
		path = "/proc/self/mountinfo"
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	return parseMountInfo(f, under)
}

// parseMountInfo reads the format of proc(5): fields up to the "-"
// separator, then fstype, source and super options. It keeps the mount
// points at or below under ("" keeps all), and skips the others' lines
// before anything of them is allocated: the table holds a few lines for
// every container on the node, and each pod's teardown reads it for each
// of its volumes (71 MB of garbage when a hundred pods were deleted at
// once, most of the agent's peak).
func parseMountInfo(r io.Reader, under string) ([]mountPoint, error) {
	var mps []mountPoint
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if under != "" {
			// The mount point is the fifth field; fields are separated by
			// single spaces, and spaces within one are escaped.
			rest := line
			var path []byte
			found := true
			for range 5 {
				path, rest, found = bytes.Cut(rest, []byte{' '})
			}
			if !found {
				return nil, fmt.Errorf("malformed mountinfo line %q", line)
			}
			if bytes.IndexByte(path, '\\') < 0 {
				if !pathAtOrBelow(path, under) {
					continue
				}
			} else if !isAtOrBelow(unescapeOctal(string(path)), under) {
				continue
			}
		}
		fields := strings.Fields(string(line))
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(fields) < sep+3 {
			return nil, fmt.Errorf("malformed mountinfo line %q", line)
		}
		mp := mountPoint{
			path:   unescapeOctal(fields[4]),
			fstype: fields[sep+1],
			source: unescapeOctal(fields[sep+2]),
		}
		if len(fields) > sep+3 {
			mp.superOpts = fields[sep+3]
		}
		for _, opt := range fields[6:sep] {
			if strings.HasPrefix(opt, "shared:") {
				mp.shared = true
			}
		}
		mps = append(mps, mp)
	}
	return mps, sc.Err()
}

// unescapeOctal undoes the kernel's \040-style escaping of spaces, tabs,
// newlines and backslashes in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountsUnder returns the mount points at or below dir, deepest first, so
// they can be unmounted in that order.
func mountsUnder(mps []mountPoint, dir string) []mountPoint {
	var out []mountPoint
	for _, mp := range mps {
		if isAtOrBelow(mp.path, dir) {
			out = append(out, mp)
		}
	}
	// Later lines are mounted later, hence on top: unmount in reverse.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// isAtOrBelow says whether path is dir or a path below it.
func isAtOrBelow(path, dir string) bool {
	return path == dir || len(path) > len(dir) && path[len(dir)] == '/' && strings.HasPrefix(path, dir)
}

// pathAtOrBelow is isAtOrBelow of a path still in the reader's buffer.
func pathAtOrBelow(path []byte, dir string) bool {
	return string(path) == dir || len(path) > len(dir) && path[len(dir)] == '/' && string(path[:len(dir)]) == dir
}

// findMount returns the topmost mount exactly at path.
func findMount(mps []mountPoint, path string) (mountPoint, bool) {
	for i := len(mps) - 1; i >= 0; i-- {
		if mps[i].path == path {
			return mps[i], true
		}
	}
	return mountPoint{}, false
}
