package stats

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestReadSmallReadsWholeFiles(t *testing.T) {
	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef\n"), 1000) // past the 8-KiB buffer
	for name, content := range map[string][]byte{"empty": nil, "small": []byte("42\n"), "big": big} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readSmall(path, make([]byte, 0, 8192))
		if err != nil || !bytes.Equal(got, content) {
			t.Errorf("%s: read %d bytes, %v; want its %d bytes", name, len(got), err, len(content))
		}
	}
	// A proc file, whose size stat does not tell.
	want, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readSmall("/proc/self/limits", nil); err != nil || !bytes.Equal(got, want) {
		t.Errorf("/proc/self/limits: %q, %v; want %q", got, err, want)
	}
	if _, err := readSmall(filepath.Join(dir, "missing"), nil); !errors.Is(err, fs.ErrNotExist) || !os.IsNotExist(err) {
		t.Errorf("missing file: %v, want a not-exist error", err)
	}
	if _, err := readSmall(dir, nil); err == nil {
		t.Error("reading a directory succeeded")
	}
}
