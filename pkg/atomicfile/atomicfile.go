// Package atomicfile replaces a file's content at once: a reader sees the
// old content or the new, never a part, and a crash leaves one of them.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data with mode to a temporary file beside path, syncs it
// and renames it over path. The temporary name starts with a dot (what
// watches a directory, a runtime reading CNI configurations, skips it)
// and is removed if anything fails.
func Write(path string, data []byte, mode os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
