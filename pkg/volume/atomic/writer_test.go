package atomic

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// readTree reads every regular file under root (followed if it is a link),
// keyed by its path relative to root. Links that lead nowhere (a name whose
// version is gone) are left out, as a reader would find them missing.
func readTree(root string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(root+"/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Clean(p))
		if p == root+"/" || strings.HasPrefix(rel, "..") {
			if d.IsDir() && p != root+"/" {
				return fs.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil && errors.Is(err, unix.EISDIR):
			// A link to a directory: walk it as the reader would.
			sub, err := readTree(p)
			for k, v := range sub {
				out[filepath.Join(rel, k)] = v
			}
			return err
		case err != nil:
			return err
		}
		out[rel] = string(b)
		return nil
	})
	return out, err
}

// TestReaderSeesOneVersionAtEveryStep reads the volume after every change
// Write makes to it (the writer's afterStep seam), which is every moment a
// concurrent reader could land in, so the interleavings a reader goroutine
// would only hit by luck are all taken, every run. At each step:
//   - the tree under ..data is exactly the old set or exactly the new one;
//   - once it is the new one it never goes back;
//   - the user-visible names show files of one version only, and with the
//     same names in both versions exactly one whole version;
//   - a reader that opened ..data before the swap (an open directory, as a
//     process's cwd) still reads the whole old set until it is removed.
func TestReaderSeesOneVersionAtEveryStep(t *testing.T) {
	tests := []struct {
		name     string
		old, new []string
	}{
		{name: "same names", old: []string{"a", "b", "c", "d/e"}, new: []string{"a", "b", "c", "d/e"}},
		{name: "names added and removed", old: []string{"a", "b", "d/e"}, new: []string{"a", "c", "d/f"}},
	}
	version := func(tag string, names []string) (map[string]FileProjection, map[string]string) {
		payload, want := map[string]FileProjection{}, map[string]string{}
		for _, n := range names {
			payload[n] = FileProjection{Data: []byte(tag + ":" + n), Mode: 0o644}
			want[n] = tag + ":" + n
		}
		return payload, want
	}
	// versionOf says which version every file of got belongs to, or "mix".
	versionOf := func(got map[string]string) string {
		tags := map[string]bool{}
		for _, v := range got {
			tags[strings.SplitN(v, ":", 2)[0]] = true
		}
		if len(tags) > 1 {
			return "mix"
		}
		for tag := range tags {
			return tag
		}
		return "none"
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := NewWriter(dir)
			if err != nil {
				t.Fatal(err)
			}
			oldPayload, oldWant := version("old", tc.old)
			newPayload, newWant := version("new", tc.new)
			if _, err := w.Write(oldPayload, nil); err != nil {
				t.Fatal(err)
			}
			sameNames := fmt.Sprint(tc.old) == fmt.Sprint(tc.new)

			pinned := -1
			var steps []string
			seen := map[string]int{}
			pinnedReads := 0
			w.afterStep = func(step string) {
				steps = append(steps, step)
				if pinned < 0 {
					if pinned, err = unix.Open(filepath.Join(dir, dataLink), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
						t.Fatalf("%s: pin %s: %v", step, dataLink, err)
					}
				}
				data, err := readTree(filepath.Join(dir, dataLink))
				if err != nil {
					t.Fatalf("%s: read %s: %v", step, dataLink, err)
				}
				var now string
				switch fmt.Sprint(data) {
				case fmt.Sprint(oldWant):
					now = "old"
				case fmt.Sprint(newWant):
					now = "new"
				default:
					t.Fatalf("after %q %s holds %v: neither the old set %v nor the new %v", step, dataLink, data, oldWant, newWant)
				}
				if now == "old" && seen["new"] > 0 {
					t.Fatalf("after %q %s went back to the old version", step, dataLink)
				}
				seen[now]++

				vis, err := readTree(dir)
				if err != nil {
					t.Fatalf("%s: read visible names: %v", step, err)
				}
				if v := versionOf(vis); v != now {
					t.Fatalf("after %q the visible names show %v (%s) while %s is %s", step, vis, v, dataLink, now)
				}
				if sameNames && fmt.Sprint(vis) != fmt.Sprint(data) {
					t.Fatalf("after %q the visible names show %v, want the whole %s version %v", step, vis, now, data)
				}

				if step == "old version removed" {
					return
				}
				for _, n := range tc.old {
					fd, err := unix.Openat(pinned, n, unix.O_RDONLY|unix.O_CLOEXEC, 0)
					if err != nil {
						t.Fatalf("after %q the pinned reader cannot open %s: %v", step, n, err)
					}
					f := os.NewFile(uintptr(fd), n) // f owns fd now
					b, err := io.ReadAll(f)
					f.Close()
					if err != nil || string(b) != oldWant[n] {
						t.Fatalf("after %q the pinned reader reads %s = %q %v, want %q", step, n, b, err, oldWant[n])
					}
				}
				pinnedReads++
			}
			if _, err := w.Write(newPayload, nil); err != nil {
				t.Fatal(err)
			}
			if pinned >= 0 {
				unix.Close(pinned)
			}
			// The steps that make the window must all have been taken.
			for _, step := range []string{"file written", newDataLink + " created", dataLink + " swapped", "old version removed"} {
				if !slices.Contains(steps, step) {
					t.Fatalf("Write never reached %q; steps %v", step, steps)
				}
			}
			if seen["old"] == 0 || seen["new"] == 0 {
				t.Fatalf("reads saw %v, want both versions", seen)
			}
			if pinnedReads == 0 {
				t.Fatal("the pinned reader never read")
			}
			if got := visible(t, dir); fmt.Sprint(got) != fmt.Sprint(newWant) {
				t.Errorf("final files = %v, want %v", got, newWant)
			}
			if v := versionDirs(t, dir); len(v) != 1 {
				t.Errorf("leftover versions: %v", v)
			}
			t.Logf("%d steps, %v", len(steps), seen)
		})
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
