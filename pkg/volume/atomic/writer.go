// Package atomic publishes a set of files into a directory so that a reader
// sees either the whole old set or the whole new set, never a mix.
//
// Layout of a published directory:
//
//	<dir>/..2026_11_22_05_50_00.123456789/   the files of one version
//	<dir>/..data -> ..2026_11_22_05_50_00.123456789
//	<dir>/<top> -> ..data/<top>             one link per top-level name
//
// A new version is written into a fresh timestamped directory, then the
// ..data link is replaced with rename(2), which is atomic; the user-visible
// links resolve through ..data, so they switch at the same instant.
package atomic

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DataLink is the name of the link to the current version.
const DataLink = dataLink

const (
	dataLink    = "..data"
	newDataLink = "..data_tmp"
	// tsLayout names a version directory; the leading ".." keeps it out of
	// the user-visible namespace, since payload paths may not start with "..".
	tsLayout = "..2006_01_02_15_04_05."
)

// FileProjection is one file of a payload.
type FileProjection struct {
	// Data is the file's content.
	Data []byte
	// Mode is the file's permission bits.
	Mode int32
}

// Writer publishes payloads into one directory, which it owns entirely.
// A Writer is not safe for concurrent use on the same directory; callers
// serialise writes per volume.
type Writer struct {
	dir string
	// afterStep, when set (tests only), runs after each change Write makes
	// to the directory, with the step's name: a test reads the directory
	// there, at every moment a concurrent reader could, instead of hoping
	// a reader goroutine lands in the window.
	afterStep func(step string)
}

func (w *Writer) stepDone(step string) {
	if w.afterStep != nil {
		w.afterStep(step)
	}
}

// NewWriter returns a Writer for dir, which must already exist and be a real
// directory (not a symlink).
func NewWriter(dir string) (*Writer, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("atomic writer target: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("atomic writer target %s is not a directory", dir)
	}
	return &Writer{dir: dir}, nil
}

// Write publishes payload. setPerms, if not nil, runs on the new version's
// directory before it becomes visible (fsGroup ownership). It reports whether
// anything changed; an unchanged payload touches nothing.
func (w *Writer) Write(payload map[string]FileProjection, setPerms func(dir string) error) (bool, error) {
	clean, err := ValidatePayload(payload)
	if err != nil {
		return false, err
	}

	oldTS, err := w.currentVersion()
	if err != nil {
		return false, err
	}
	oldPaths := map[string]bool{}
	if oldTS != "" {
		same, paths, err := w.sameAsVersion(oldTS, clean, setPerms != nil)
		if err != nil {
			return false, err
		}
		oldPaths = paths
		if same && w.linksPresent(clean) {
			return false, nil
		}
	}

	tsDir, err := os.MkdirTemp(w.dir, time.Now().UTC().Format(tsLayout))
	if err != nil {
		return false, fmt.Errorf("create version directory: %w", err)
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		_ = os.RemoveAll(tsDir)
		return false, fmt.Errorf("chmod version directory: %w", err)
	}
	w.stepDone("version directory created")
	if err := w.writePayload(tsDir, clean); err != nil {
		_ = os.RemoveAll(tsDir)
		return false, err
	}
	if setPerms != nil {
		if err := setPerms(tsDir); err != nil {
			_ = os.RemoveAll(tsDir)
			return false, fmt.Errorf("set permissions: %w", err)
		}
		w.stepDone("permissions set")
	}

	// Swap ..data. A stale ..data_tmp (a crash mid-swap, or a planted
	// entry) is removed first; os.Remove never follows a symlink.
	tmpLink := filepath.Join(w.dir, newDataLink)
	if err := os.Remove(tmpLink); err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = os.RemoveAll(tsDir)
		return false, fmt.Errorf("remove stale %s: %w", newDataLink, err)
	}
	if err := os.Symlink(filepath.Base(tsDir), tmpLink); err != nil {
		_ = os.RemoveAll(tsDir)
		return false, fmt.Errorf("create %s: %w", newDataLink, err)
	}
	w.stepDone(newDataLink + " created")
	if err := w.replaceDataLink(tmpLink); err != nil {
		_ = os.Remove(tmpLink)
		_ = os.RemoveAll(tsDir)
		return false, err
	}
	w.stepDone(dataLink + " swapped")

	if err := w.createLinks(clean); err != nil {
		return true, err
	}
	if err := w.removeStale(oldPaths, clean); err != nil {
		return true, err
	}
	if oldTS != "" && oldTS != filepath.Base(tsDir) {
		if err := os.RemoveAll(filepath.Join(w.dir, oldTS)); err != nil {
			return true, fmt.Errorf("remove old version %s: %w", oldTS, err)
		}
		w.stepDone("old version removed")
	}
	return true, nil
}

// replaceDataLink renames tmpLink over ..data. rename(2) replaces a symlink
// or file atomically but refuses a directory: a planted ..data directory is
// removed (without following anything) and the rename retried.
func (w *Writer) replaceDataLink(tmpLink string) error {
	target := filepath.Join(w.dir, dataLink)
	err := os.Rename(tmpLink, target)
	if err == nil {
		return nil
	}
	fi, lerr := os.Lstat(target)
	if lerr != nil || !fi.IsDir() {
		return fmt.Errorf("swap %s: %w", dataLink, err)
	}
	if err := os.RemoveAll(target); err != nil {
		return fmt.Errorf("remove unexpected %s directory: %w", dataLink, err)
	}
	if err := os.Rename(tmpLink, target); err != nil {
		return fmt.Errorf("swap %s: %w", dataLink, err)
	}
	return nil
}

// currentVersion returns the version directory ..data points to, or "" when
// there is none or it is not one of ours: a link that leaves the directory,
// or points at anything but a real version directory, is ignored and will be
// replaced.
func (w *Writer) currentVersion() (string, error) {
	target, err := os.Readlink(filepath.Join(w.dir, dataLink))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EINVAL) {
			return "", nil
		}
		return "", fmt.Errorf("read %s: %w", dataLink, err)
	}
	if !isVersionName(target) {
		return "", nil
	}
	fi, err := os.Lstat(filepath.Join(w.dir, target))
	if err != nil || !fi.IsDir() {
		return "", nil
	}
	return target, nil
}

func isVersionName(name string) bool {
	return strings.HasPrefix(name, "..") && !strings.Contains(name, "/") &&
		name != dataLink && name != newDataLink && name != ".."
}

// sameAsVersion compares the version directory with payload, and returns
// the top-level names the version holds. It reads regular files only and
// never follows a symlink. With permsAdded (setPerms in use) a file may
// have more permission bits than asked for.
func (w *Writer) sameAsVersion(ts string, payload map[string]FileProjection, permsAdded bool) (bool, map[string]bool, error) {
	root := filepath.Join(w.dir, ts)
	seen := 0
	same := true
	tops := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		tops[strings.SplitN(rel, "/", 2)[0]] = true
		if d.IsDir() {
			return nil
		}
		want, ok := payload[rel]
		if !ok || !d.Type().IsRegular() {
			same = false
			return nil
		}
		seen++
		got, err := readNoFollow(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		perm, wantPerm := info.Mode().Perm(), fs.FileMode(want.Mode)&fs.ModePerm
		modeOK := perm == wantPerm || (permsAdded && perm&wantPerm == wantPerm)
		if !bytes.Equal(got, want.Data) || !modeOK {
			same = false
		}
		return nil
	})
	if err != nil {
		return false, nil, fmt.Errorf("read current version: %w", err)
	}
	return same && seen == len(payload), tops, nil
}

func readNoFollow(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

// writePayload writes every file under dir, creating parent directories.
func (w *Writer) writePayload(dir string, payload map[string]FileProjection) error {
	for rel, fp := range payload {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("create directory for %s: %w", rel, err)
		}
		mode := fs.FileMode(fp.Mode) & fs.ModePerm
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode)
		if err != nil {
			return fmt.Errorf("write %s: %w", rel, err)
		}
		_, werr := f.Write(fp.Data)
		cerr := f.Close()
		if err := errors.Join(werr, cerr); err != nil {
			return fmt.Errorf("write %s: %w", rel, err)
		}
		// The umask trimmed the mode at creation.
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("chmod %s: %w", rel, err)
		}
		w.stepDone("file written")
	}
	return nil
}

// linksPresent reports whether every top-level name is our link.
func (w *Writer) linksPresent(payload map[string]FileProjection) bool {
	for top := range topLevel(payload) {
		target, err := os.Readlink(filepath.Join(w.dir, top))
		if err != nil || target != filepath.Join(dataLink, top) {
			return false
		}
	}
	return true
}

// createLinks points each top-level name through ..data. Whatever else sits
// at that name is removed first; nothing is followed.
func (w *Writer) createLinks(payload map[string]FileProjection) error {
	for top := range topLevel(payload) {
		p := filepath.Join(w.dir, top)
		want := filepath.Join(dataLink, top)
		if target, err := os.Readlink(p); err == nil && target == want {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("replace %s: %w", top, err)
		}
		if err := os.Symlink(want, p); err != nil {
			return fmt.Errorf("link %s: %w", top, err)
		}
		w.stepDone("link created")
	}
	return nil
}

// removeStale removes the links of top-level names the old version had and
// the new one has not.
func (w *Writer) removeStale(old map[string]bool, payload map[string]FileProjection) error {
	keep := topLevel(payload)
	for top := range old {
		if keep[top] || strings.HasPrefix(top, "..") {
			continue
		}
		if err := os.Remove(filepath.Join(w.dir, top)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale %s: %w", top, err)
		}
		w.stepDone("stale link removed")
	}
	return nil
}

func topLevel(payload map[string]FileProjection) map[string]bool {
	tops := make(map[string]bool, len(payload))
	for rel := range payload {
		tops[strings.SplitN(rel, "/", 2)[0]] = true
	}
	return tops
}
