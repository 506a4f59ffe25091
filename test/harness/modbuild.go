package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// moduleBinary is one command of a module from the Go module proxy, built in a copy of
// the module's own tree so that its go.mod, and the replace lines in it, apply: they
// count only in the main module.
type moduleBinary struct {
	name    string // the binary, and the cache entry <name>-<version>
	module  string // the module path, e.g. github.com/kubernetes-csi/csi-test/v5
	version string
	pkg     string // the main package inside the module, e.g. ./cmd/csi-sanity
	ldflags string // besides -s -w
}

// binDir is where the binary lives once built: <cache>/<name>-<version>/bin.
func (c *Config) binDir(b moduleBinary) string {
	return filepath.Join(c.CacheDir, b.name+"-"+b.version, "bin")
}

// ensureModuleBinary builds b into the cache unless a previous run did, and returns the
// binary's path. It builds at the lowest CPU priority: a cold build of a sidecar takes
// minutes on 2 cores and must not starve a cluster running beside it.
func (c *Config) ensureModuleBinary(ctx context.Context, b moduleBinary) (string, error) {
	bin := c.binDir(b)
	out := filepath.Join(bin, b.name)
	if complete(bin, map[string]string{b.name: b.pkg}) {
		c.Logf("%s %s: cached in %s", b.name, b.version, bin)
		return out, nil
	}
	start := time.Now()
	c.Logf("%s %s: building from %s (minutes on 2 cores, once)", b.name, b.version, b.module)
	mod, err := goModDownload(ctx, b.module+"@"+b.version)
	if err != nil {
		return "", err
	}
	src := filepath.Join(filepath.Dir(bin), "src")
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
	// Into a temporary directory first: a build cut short never leaves a bin dir that
	// looks complete.
	tmp := bin + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	ld := strings.TrimSpace("-s -w " + b.ldflags)
	cmd := exec.CommandContext(ctx, "nice", "-n", "19", "go", "build", "-mod=mod", "-trimpath", "-ldflags", ld,
		"-o", filepath.Join(tmp, b.name), b.pkg)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if outb, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s %s: %w\n%s", b.name, b.version, err, tail(outb, 4000))
	}
	if err := os.RemoveAll(bin); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	// The source copy is only needed for the build; it is hundreds of megabytes.
	if err := os.RemoveAll(src); err != nil {
		return "", err
	}
	c.Logf("%s %s: built in %s", b.name, b.version, time.Since(start).Round(time.Second))
	return out, nil
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
