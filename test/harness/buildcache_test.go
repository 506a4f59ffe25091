package harness

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A binary added to a list is built alone; the others and files beside them stay.
func TestMissingAndInstallBinaries(t *testing.T) {
	dir := t.TempDir()
	bin, tmp := filepath.Join(dir, "bin"), filepath.Join(dir, "bin.tmp")
	for _, f := range []string{filepath.Join(bin, "old"), filepath.Join(bin, "e2e.test"), filepath.Join(tmp, "new")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(filepath.Base(f)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := map[string]string{"old": "example.com/old", "new": "example.com/new"}
	if got := missingBinaries(bin, names); !reflect.DeepEqual(got, map[string]string{"new": "example.com/new"}) {
		t.Fatalf("missingBinaries = %v, want only new", got)
	}
	if err := installBinaries(tmp, bin, map[string]string{"new": "example.com/new"}); err != nil {
		t.Fatal(err)
	}
	if !complete(bin, names) || !complete(bin, map[string]string{"e2e.test": ""}) {
		t.Errorf("bin is not complete after the install")
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("%s is still there (%v)", tmp, err)
	}
}
