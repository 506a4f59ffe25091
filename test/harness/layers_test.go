package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLayerStore(t *testing.T) {
	c := &Config{CacheDir: t.TempDir()}
	dir := filepath.Join(c.CacheDir, "layers")
	files := []tarFile{{name: "bin", dir: true, mode: 0o755}, {name: "bin/tool", mode: 0o755, data: []byte("#!/bin/sh\necho hi\n")}}
	stored := func() []string {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}

	first, err := c.layerOf(files)
	if err != nil {
		t.Fatal(err)
	}
	tarData, err := tarOf(files)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(tarData)
	if diffID, err := first.DiffID(); err != nil || diffID.Hex != hex.EncodeToString(sum[:]) {
		t.Errorf("diffID %v (%v), want the tar's sha256", diffID, err)
	}
	if got := stored(); len(got) != 1 || got[0] != hex.EncodeToString(sum[:])+".tar.gz" {
		t.Fatalf("stored %v, want one layer named by its tar's sha256", got)
	}

	// Made again: taken from the store, the same digest, its use recorded.
	old := time.Now().Add(-time.Hour)
	gz := filepath.Join(dir, stored()[0])
	if err := os.Chtimes(gz, old, old); err != nil {
		t.Fatal(err)
	}
	again, err := c.layerOf(files)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Digest()
	d2, _ := again.Digest()
	if d1 != d2 || len(stored()) != 1 {
		t.Errorf("digests %v and %v, stored %v: want one layer, the same", d1, d2, stored())
	}
	if info, err := os.Stat(gz); err != nil || !info.ModTime().After(old) {
		t.Errorf("a stored layer used again keeps its old time: %v", err)
	}

	// Another content is another layer; one unused for longer than layerKeep, and a store
	// cut short long ago, go when it is stored.
	stale := time.Now().Add(-layerKeep - time.Hour)
	for _, name := range []string{"0000.tar.gz", ".layer-123"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, stale, stale); err != nil {
			t.Fatal(err)
		}
	}
	other, err := c.layerOf([]tarFile{{name: "other", mode: 0o644, data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if d3, _ := other.Digest(); d3 == d1 {
		t.Error("two contents, one digest")
	}
	if got := stored(); len(got) != 2 {
		t.Errorf("stored %v, want the two layers and nothing stale", got)
	}

	// Without a cache dir nothing is stored and the layer is the same content.
	plain, err := (&Config{}).layerOf(files)
	if err != nil {
		t.Fatal(err)
	}
	if diffID, err := plain.DiffID(); err != nil || diffID.Hex != hex.EncodeToString(sum[:]) {
		t.Errorf("without a store: diffID %v (%v)", diffID, err)
	}
}
