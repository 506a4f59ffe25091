package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// removeDir unmounts everything at or below dir, deepest first, then
// removes dir. It refuses to remove anything while a mount remains below
// dir: RemoveAll would otherwise delete the mounted filesystem's files.
// os.RemoveAll never follows symlinks, so a link planted in a volume
// cannot point the removal outside. A missing dir is success.
func removeDir(m mounter, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	mps, err := m.mountPoints(dir)
	if err != nil {
		return err
	}
	for _, mp := range mountsUnder(mps, dir) {
		if err := m.unmount(mp.path); err != nil {
			return err
		}
	}
	mps, err = m.mountPoints(dir)
	if err != nil {
		return err
	}
	if left := mountsUnder(mps, dir); len(left) > 0 {
		return fmt.Errorf("%s is still mounted after unmount; not removing %s", left[0].path, dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
