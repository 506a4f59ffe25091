package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// modEdit, when set, are `go mod edit` arguments applied to the copy before the build:
	// for a module whose go.mod replaces a module by a directory its zip does not hold.
	modEdit []string
	// prepare, when set, edits the copy's sources (in src) before the build.
	prepare func(src string) error
}

// binDir is where the binary lives once built: <cache>/<name>-<version>/bin.
func (c *Config) binDir(b moduleBinary) string {
	return filepath.Join(c.CacheDir, b.name+"-"+b.version, "bin")
}

// ensureModuleBinary builds b into the cache unless a previous run did, and returns the
// binary's path. It builds at the lowest CPU priority: a cold build of a sidecar takes
// minutes on 2 cores and must not starve a cluster running beside it.
func (c *Config) ensureModuleBinary(ctx context.Context, b moduleBinary) (_ string, err error) {
	bin := c.binDir(b)
	out := filepath.Join(bin, b.name)
	want := map[string]string{b.name: b.pkg}
	if complete(bin, want) {
		return out, nil
	}
	// make test builds some of these in the background (build-conformance) while a run
	// may want them: one process builds, the other waits for it.
	unlock, err := c.lockBuild(b.name + "-" + b.version)
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(bin, want) { // built by the process we waited for
		return out, nil
	}
	p := c.startBuild(b.name+" "+b.version, []string{b.name}, "")
	defer func() { p.end(err) }()
	p.setPhase("downloading " + b.module)
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
	if len(b.modEdit) > 0 {
		if err := goCmdIn(ctx, src, nil, append([]string{"mod", "edit"}, b.modEdit...)...); err != nil {
			return "", fmt.Errorf("build %s %s: %w", b.name, b.version, err)
		}
	}
	if b.prepare != nil {
		if err := b.prepare(src); err != nil {
			return "", fmt.Errorf("build %s %s: %w", b.name, b.version, err)
		}
	}
	// With the upstream build's versions of the modules both use, and its flags (no
	// -trimpath: it is part of each package's build ID), so that the packages they share
	// are found compiled (modalign.go).
	p.setPhase("aligning its dependencies with the upstream build's")
	if err := c.alignWithUpstream(ctx, src); err != nil {
		return "", fmt.Errorf("build %s %s: %w", b.name, b.version, err)
	}
	flags := []string{"-mod=mod"}
	// Into a temporary directory first: a build cut short never leaves a bin dir that
	// looks complete.
	tmp := bin + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	ld := strings.TrimSpace("-s -w " + b.ldflags)
	env := []string{"CGO_ENABLED=0"}
	p.setPhase("downloading its dependencies")
	p.expect(packagesToCompile(ctx, src, env, flags, b.pkg))
	p.setPhase("")
	args := append(append([]string{"nice", "-n", "19", "go", "build", "-v", "-ldflags", ld, "-o", filepath.Join(tmp, b.name)}, flags...), b.pkg)
	if err := runBuild(ctx, src, env, p, args...); err != nil {
		return "", fmt.Errorf("build %s %s: %w", b.name, b.version, err)
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
