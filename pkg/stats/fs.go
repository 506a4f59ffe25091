package stats

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// fsInfo is what statfs says of the filesystem holding a path.
type fsInfo struct {
	at                            time.Time
	capacity, available, used     uint64
	inodes, inodesFree, inodeUsed uint64
}

func statFS(path string, now time.Time) (fsInfo, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return fsInfo{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	bs := uint64(st.Bsize)
	return fsInfo{
		at:         now,
		capacity:   st.Blocks * bs,
		available:  st.Bavail * bs,
		used:       subFloor(st.Blocks, st.Bfree) * bs,
		inodes:     st.Files,
		inodesFree: st.Ffree,
		inodeUsed:  subFloor(st.Files, st.Ffree),
	}, nil
}

// fsStats is the whole filesystem, as the node's fs and imageFs show it.
func (f fsInfo) fsStats() *statsapi.FsStats {
	return &statsapi.FsStats{
		Time:           metav1.NewTime(f.at),
		AvailableBytes: ptr(f.available),
		CapacityBytes:  ptr(f.capacity),
		UsedBytes:      ptr(f.used),
		InodesFree:     ptr(f.inodesFree),
		Inodes:         ptr(f.inodes),
		InodesUsed:     ptr(f.inodeUsed),
	}
}

// shareOf is a part of the filesystem (a volume, a container's logs):
// the filesystem's capacity and free space with the part's own usage.
func (f fsInfo) shareOf(used, inodesUsed uint64, at time.Time) *statsapi.FsStats {
	return &statsapi.FsStats{
		Time:           metav1.NewTime(at),
		AvailableBytes: ptr(f.available),
		CapacityBytes:  ptr(f.capacity),
		UsedBytes:      ptr(used),
		InodesFree:     ptr(f.inodesFree),
		Inodes:         ptr(f.inodes),
		InodesUsed:     ptr(inodesUsed),
	}
}

// usage is the space and inodes a directory tree takes on disk.
type usage struct {
	bytes, inodes uint64
}

// diskUsage walks path as du does: blocks actually allocated, each inode
// counted once however many links it has, without crossing into other
// filesystems mounted below it. Entries that vanish during the walk are
// skipped.
func diskUsage(path string) (usage, error) {
	var u usage
	root, err := os.Lstat(path)
	if err != nil {
		return u, err
	}
	rootDev := statOf(root).Dev
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		st := statOf(fi)
		if st.Dev != rootDev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		key := inode{uint64(st.Dev), uint64(st.Ino)}
		if seen[key] {
			return nil
		}
		seen[key] = true
		u.inodes++
		u.bytes += uint64(st.Blocks) * 512
		return nil
	})
	return u, err
}

// filesUsage adds up the regular files directly in dir (not below it),
// as the kubelet counts a pod's and a container's log files.
func filesUsage(dir string) (usage, error) {
	var u usage
	entries, err := os.ReadDir(dir)
	if err != nil {
		return u, err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		u.inodes++
		u.bytes += uint64(statOf(fi).Blocks) * 512
	}
	return u, nil
}

func statOf(fi fs.FileInfo) *syscall.Stat_t {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st
	}
	return &syscall.Stat_t{}
}

// changeTime is a file's ctime: for a cgroup directory, when it was made.
func changeTime(fi fs.FileInfo) time.Time {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return time.Time{}
	}
	return time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
}

func ptr[T any](v T) *T { return &v }
