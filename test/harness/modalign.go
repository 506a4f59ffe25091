package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/semver"
)

// The sidecars and CoreDNS are separate modules from the module proxy, each with its own
// versions of what they share with the upstream binaries (client-go, apimachinery, gRPC,
// protobuf, the x/ modules): built as released, a cold machine compiles those hundreds of
// packages again for each module. Built with the upstream tools module's versions of every
// module both use (older ones too), and with the flags the upstream build uses, they find
// those packages in the Go build cache: on a fresh machine csi-provisioner then compiled 70
// packages in 15 s instead of 1,271 in 5 minutes.

// buildList is a module graph's selected versions, by module path: the version a replace
// line points at where the module is replaced by another version.
type buildList map[string]string

// moduleVersion is one module of `go list -m all`, with its replacement if any.
type moduleVersion struct {
	path, version   string
	replacedVersion string // the version a replace line selects; empty when not replaced, or replaced by a directory
	replaced        bool
}

// listModules runs `go list -m all` in dir (a module's root, or a directory holding only
// its go.mod and go.sum), which may update the go.sum there.
func listModules(ctx context.Context, dir string) ([]moduleVersion, error) {
	return listModulesMode(ctx, dir, "mod")
}

// listModulesMode is listModules with the -mod mode given: "readonly" for the project's own
// module, whose files must not change.
func listModulesMode(ctx context.Context, dir, mode string) ([]moduleVersion, error) {
	const tmpl = `{{.Path}} {{.Version}}{{if .Replace}} => {{.Replace.Path}} {{.Replace.Version}}{{end}}`
	cmd := exec.CommandContext(ctx, "go", "list", "-mod="+mode, "-m", "-f", tmpl, "all")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return nil, fmt.Errorf("go list -m all in %s: %w\n%s", dir, err, tail(stderr, 2000))
	}
	return parseModuleList(string(out)), nil
}

// parseModuleList reads listModules' lines: "path version" or "path version => path2 version2".
func parseModuleList(out string) []moduleVersion {
	var mods []moduleVersion
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue // the main module has no version
		}
		m := moduleVersion{path: f[0], version: f[1]}
		if len(f) >= 4 && f[2] == "=>" {
			m.replaced = true
			if len(f) >= 5 {
				m.replacedVersion = f[4]
			}
		}
		mods = append(mods, m)
	}
	return mods
}

// selected is the build list of mods: each module at the version the build uses.
func selected(mods []moduleVersion) buildList {
	bl := buildList{}
	for _, m := range mods {
		switch {
		case !m.replaced:
			bl[m.path] = m.version
		case m.replacedVersion != "":
			bl[m.path] = m.replacedVersion
		}
	}
	return bl
}

// alignEdits are the `go mod edit` flags that move mods (a module's graph) onto base's
// versions of the modules both use. A module the target replaces is replaced by base's
// version instead. Any other is, when exact, replaced by base's version too (older ones
// as well: one differing module below client-go makes everything above it differ); when
// not exact, required at base's version where that is newer (minimal version selection
// keeps a newer one the target needs). Sorted, for a stable go.mod.
func alignEdits(mods []moduleVersion, base buildList, exact bool) []string {
	var edits []string
	for _, m := range mods {
		want, ok := base[m.path]
		if !ok {
			continue
		}
		switch {
		case m.replaced && m.replacedVersion == "":
			// replaced by a directory: the module's own code, left alone
		case m.replaced || exact:
			current := m.version
			if m.replaced {
				current = m.replacedVersion
			}
			if current != want {
				edits = append(edits, "-replace="+m.path+"="+m.path+"@"+want)
			}
		case semver.Compare(want, m.version) > 0:
			edits = append(edits, "-require="+m.path+"@"+want)
		}
	}
	sort.Strings(edits)
	return edits
}

// alignWithUpstream edits the go.mod in src onto the build list of the upstream tools
// module (built first: its go.mod and go.sum are kept beside its binaries), exactly.
func (c *Config) alignWithUpstream(ctx context.Context, src string) error {
	bin, err := c.EnsureUpstream(ctx)
	if err != nil {
		return err
	}
	mods, err := listModulesMode(ctx, filepath.Join(filepath.Dir(bin), "src"), "readonly")
	if err != nil {
		return fmt.Errorf("the upstream build list: %w", err)
	}
	return alignTo(ctx, src, selected(mods), true)
}

// alignWithRepo edits the go.mod in src onto the project module's versions (in repo) of the
// modules both use: the upstream binaries share about 750 packages with the agent (the
// client libraries, gRPC, protobuf, the x/ modules), which make test's unit tests compile
// first; built with the same versions and flags, they are compiled once.
func alignWithRepo(ctx context.Context, src, repo string) error {
	mods, err := listModulesMode(ctx, repo, "readonly")
	if err != nil {
		return err
	}
	return alignTo(ctx, src, selected(mods), false)
}

// alignTo edits the go.mod in src onto base's versions (alignEdits).
func alignTo(ctx context.Context, src string, base buildList, exact bool) error {
	mods, err := listModules(ctx, src)
	if err != nil {
		return err
	}
	edits := alignEdits(mods, base, exact)
	if len(edits) == 0 {
		return nil
	}
	return goCmdIn(ctx, src, nil, append([]string{"mod", "edit"}, edits...)...)
}
