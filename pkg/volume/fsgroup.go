package volume

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
)

const (
	rwGroupMask   fs.FileMode = 0o660
	roGroupMask   fs.FileMode = 0o440
	execGroupMask fs.FileMode = 0o110
)

// fsGroupPlan says what ownership a volume's files get; nil means none.
type fsGroupPlan struct {
	gid      int64
	readOnly bool
	// onRootMismatch skips the walk when the root already looks right.
	onRootMismatch bool
}

func planFSGroup(fsGroup *int64, policy *v1.PodFSGroupChangePolicy, readOnly bool) *fsGroupPlan {
	if fsGroup == nil {
		return nil
	}
	return &fsGroupPlan{
		gid:            *fsGroup,
		readOnly:       readOnly,
		onRootMismatch: policy != nil && *policy == v1.FSGroupChangeOnRootMismatch,
	}
}

func (p *fsGroupPlan) mask(isDir bool) fs.FileMode {
	m := rwGroupMask
	if p.readOnly {
		m = roGroupMask
	}
	if isDir {
		m |= os.ModeSetgid | execGroupMask
	}
	return m
}

// apply gives every file and directory under dir the group gid, group
// access and, on directories, the setgid bit. Symlinks are neither followed
// nor changed, so a link planted in a writable volume cannot redirect it.
func (p *fsGroupPlan) apply(dir string) error {
	if p == nil {
		return nil
	}
	if p.onRootMismatch && p.rootMatches(dir) {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(p.gid)); err != nil {
			return fmt.Errorf("chown %s: %w", path, err)
		}
		mode := info.Mode()&(fs.ModePerm|os.ModeSetgid|os.ModeSetuid|os.ModeSticky) | p.mask(info.IsDir())
		if err := os.Chmod(path, mode); err != nil {
			return fmt.Errorf("chmod %s: %w", path, err)
		}
		return nil
	})
}

func (p *fsGroupPlan) rootMatches(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil {
		return false
	}
	gid, ok := fileGID(fi)
	if !ok || gid != p.gid {
		return false
	}
	want := p.mask(fi.IsDir())
	return fi.Mode()&want == want
}
