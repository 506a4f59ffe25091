package atomic

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func files(kv ...string) map[string]FileProjection {
	out := map[string]FileProjection{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = FileProjection{Data: []byte(kv[i+1]), Mode: 0o644}
	}
	return out
}

// visible lists the user-visible tree: every path not starting with ".."
// resolved through its link, with its content.
func visible(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		top := filepath.Join(dir, e.Name())
		err := filepath.WalkDir(top+"/", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, filepath.Clean(p))
			out[rel] = string(b)
			return nil
		})
		if err != nil {
			// A plain file link: WalkDir on "x/" fails with ENOTDIR.
			b, rerr := os.ReadFile(top)
			if rerr != nil {
				t.Fatalf("read %s: %v / %v", top, err, rerr)
			}
			out[e.Name()] = string(b)
		}
	}
	return out
}

func versionDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "..") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestWriteSequence(t *testing.T) {
	tests := []struct {
		name    string
		writes  []map[string]FileProjection
		want    map[string]string
		changed bool
	}{
		{
			name:    "first write",
			writes:  []map[string]FileProjection{files("a", "1", "dir/b", "2")},
			want:    map[string]string{"a": "1", "dir/b": "2"},
			changed: true,
		},
		{
			name:    "same payload twice changes nothing",
			writes:  []map[string]FileProjection{files("a", "1"), files("a", "1")},
			want:    map[string]string{"a": "1"},
			changed: false,
		},
		{
			name:    "update removes stale files",
			writes:  []map[string]FileProjection{files("a", "1", "old", "x", "d/e", "y"), files("a", "2")},
			want:    map[string]string{"a": "2"},
			changed: true,
		},
		{
			name:    "empty payload empties the volume",
			writes:  []map[string]FileProjection{files("a", "1"), {}},
			want:    map[string]string{},
			changed: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := NewWriter(dir)
			if err != nil {
				t.Fatal(err)
			}
			var changed bool
			for _, p := range tc.writes {
				if changed, err = w.Write(p, nil); err != nil {
					t.Fatal(err)
				}
			}
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			got := visible(t, dir)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("files = %v, want %v", got, tc.want)
			}
			if v := versionDirs(t, dir); len(v) != 1 {
				t.Errorf("version directories = %v, want exactly one", v)
			}
		})
	}
}

func TestWriteModes(t *testing.T) {
	dir := t.TempDir()
	w, _ := NewWriter(dir)
	payload := map[string]FileProjection{
		"secret": {Data: []byte("s"), Mode: 0o400},
		"script": {Data: []byte("x"), Mode: 0o755},
	}
	if _, err := w.Write(payload, nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{"secret": 0o400, "script": 0o755} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode = %v, want %v", name, fi.Mode().Perm(), want)
		}
		link, err := os.Readlink(filepath.Join(dir, name))
		if err != nil || link != "..data/"+name {
			t.Errorf("%s link = %q, %v; want ..data/%s", name, link, err, name)
		}
	}
	// A mode change alone is a change.
	payload["secret"] = FileProjection{Data: []byte("s"), Mode: 0o440}
	changed, err := w.Write(payload, nil)
	if err != nil || !changed {
		t.Fatalf("mode change: changed=%v err=%v", changed, err)
	}
}

func TestHostilePathsRefused(t *testing.T) {
	for _, p := range []string{"/etc/passwd", "../escape", "a/../../b", "..data", "..hidden", "a/..", "", strings.Repeat("x", 256)} {
		t.Run(p, func(t *testing.T) {
			dir := t.TempDir()
			w, _ := NewWriter(dir)
			if _, err := w.Write(files(p, "x"), nil); err == nil {
				t.Fatalf("path %q accepted", p)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("refused write left %d entries", len(entries))
			}
		})
	}
	t.Run("file and directory at once", func(t *testing.T) {
		w, _ := NewWriter(t.TempDir())
		if _, err := w.Write(files("a", "1", "a/b", "2"), nil); err == nil {
			t.Fatal("accepted a path that is both a file and a directory")
		}
	})
}

func TestPlantedSymlinksNotFollowed(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		plant func(dir string) error
	}{
		{"user-visible name links outside", func(dir string) error {
			return os.Symlink(victim, filepath.Join(dir, "victim"))
		}},
		{"..data links outside", func(dir string) error {
			return os.Symlink(outside, filepath.Join(dir, "..data"))
		}},
		{"..data is a directory", func(dir string) error {
			return os.Mkdir(filepath.Join(dir, "..data"), 0o755)
		}},
		{"..data_tmp links outside", func(dir string) error {
			return os.Symlink(outside, filepath.Join(dir, "..data_tmp"))
		}},
		{"version link names a path", func(dir string) error {
			return os.Symlink("../"+filepath.Base(outside), filepath.Join(dir, "..data"))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.plant(dir); err != nil {
				t.Fatal(err)
			}
			w, _ := NewWriter(dir)
			for _, p := range []map[string]FileProjection{files("victim", "new"), files("other", "x")} {
				if _, err := w.Write(p, nil); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(victim)
			if err != nil || string(b) != "host" {
				t.Fatalf("file outside changed: %q, %v", b, err)
			}
			if got := visible(t, dir); fmt.Sprint(got) != fmt.Sprint(map[string]string{"other": "x"}) {
				t.Errorf("files = %v", got)
			}
		})
	}
}

// TestConcurrentReaderSeesOneVersion pins ..data once, as a reader that
// opens the directory does, and reads every file through it: the files
// must all come from one version.
func TestConcurrentReaderSeesOneVersion(t *testing.T) {
	dir := t.TempDir()
	w, _ := NewWriter(dir)
	names := []string{"a", "b", "c", "d/e"}
	version := func(i int) map[string]FileProjection {
		p := map[string]FileProjection{}
		for _, n := range names {
			p[n] = FileProjection{Data: bytes.Repeat([]byte{byte('0' + i%10)}, 4096), Mode: 0o644}
		}
		return p
	}
	if _, err := w.Write(version(0), nil); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readErr error
	var reads int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			fd, err := unix.Open(filepath.Join(dir, "..data"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				continue // between versions on a busy writer
			}
			seen := map[string]bool{}
			complete := true
			for _, n := range names {
				f, err := unix.Openat(fd, n, unix.O_RDONLY, 0)
				if err != nil {
					complete = false // version removed under us: whole-set gone, not a mix
					break
				}
				file := os.NewFile(uintptr(f), n)
				b := make([]byte, 8192)
				k, _ := file.Read(b)
				file.Close()
				seen[string(b[:k])] = true
			}
			unix.Close(fd)
			if complete {
				reads++
				if len(seen) != 1 {
					readErr = errors.New("reader saw files of two versions")
					return
				}
			}
		}
	}()
	for i := 1; i < 300; i++ {
		if _, err := w.Write(version(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	if reads == 0 {
		t.Log("reader never completed a read; the writer was too fast")
	}
	// A reader of the user-visible path never sees a partial file.
	b, err := os.ReadFile(filepath.Join(dir, "a"))
	if err != nil || len(b) != 4096 {
		t.Fatalf("final read: %d bytes, %v", len(b), err)
	}
	if v := versionDirs(t, dir); len(v) != 1 {
		sort.Strings(v)
		t.Errorf("leftover versions: %v", v)
	}
}

func TestSetPermsRunsBeforeSwap(t *testing.T) {
	dir := t.TempDir()
	w, _ := NewWriter(dir)
	var sawData bool
	_, err := w.Write(files("a", "1"), func(ts string) error {
		link, _ := os.Readlink(filepath.Join(dir, "..data"))
		sawData = link == filepath.Base(ts)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sawData {
		t.Error("setPerms ran after the version became visible")
	}
	if _, err := w.Write(files("a", "2"), func(string) error { return errors.New("boom") }); err == nil {
		t.Fatal("setPerms error not returned")
	}
	if got := visible(t, dir); got["a"] != "1" {
		t.Errorf("failed write changed visible content: %v", got)
	}
	if v := versionDirs(t, dir); len(v) != 1 {
		t.Errorf("failed write left versions %v", v)
	}
}
