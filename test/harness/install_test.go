package harness

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestMissingPackages(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "present")
	if err := os.WriteFile(present, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := missingPackages(map[string]string{
		"there": present, "zeta": filepath.Join(dir, "zeta"), "alpha": filepath.Join(dir, "alpha"),
	})
	if want := []string{"alpha", "zeta"}; !slices.Equal(got, want) {
		t.Errorf("missingPackages = %q, want %q", got, want)
	}
}

// TestEnsureExtraPackagesPresent: packages whose files are there need no apt-get, which a
// cancelled context would fail.
func TestEnsureExtraPackagesPresent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(file, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg := &Config{RunDir: t.TempDir(), CacheDir: t.TempDir()}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.EnsureExtraPackages(ctx, map[string]string{"some-tool": file}); err != nil {
		t.Errorf("EnsureExtraPackages of a present package: %v", err)
	}
}
