package harness

import (
	"context"
	"os"
	"path/filepath"
)

// CSISanityVersion is the csi-test release whose csi-sanity checks the project's CSI driver.
const CSISanityVersion = "v5.6.0"

// EnsureCSISanity builds csi-sanity from github.com/kubernetes-csi/csi-test/v5 into the
// cache unless a previous run did, and returns the binary's path. The module is built in
// a copy of its own tree, so that its go.mod (and any replace in it) applies; about 20
// seconds the first time.
func (c *Config) EnsureCSISanity(ctx context.Context) (string, error) {
	root := filepath.Join(c.CacheDir, "csi-sanity-"+CSISanityVersion)
	bin := filepath.Join(root, "bin")
	bins := map[string]string{"csi-sanity": "./cmd/csi-sanity"}
	if complete(bin, bins) {
		return filepath.Join(bin, "csi-sanity"), nil
	}
	mod, err := goModDownload(ctx, "github.com/kubernetes-csi/csi-test/v5@"+CSISanityVersion)
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, "src")
	if err := os.RemoveAll(src); err != nil {
		return "", err
	}
	// The module cache is read-only; the copy must be writable for -mod=mod to update go.sum.
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return "", err
	}
	if err := chmodTree(src, 0o200); err != nil {
		return "", err
	}
	ld := "-s -w -X main.VERSION=" + CSISanityVersion
	if err := c.goBuild(ctx, src, bin, ld, []string{"-mod=mod"}, bins); err != nil {
		return "", err
	}
	return filepath.Join(bin, "csi-sanity"), nil
}

// chmodTree adds the permission bits add to every file and directory under dir.
func chmodTree(dir string, add os.FileMode) error {
	return filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, info.Mode().Perm()|add)
	})
}
