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
// versions of what they share (client-go, apimachinery, gRPC, protobuf, the x/ modules):
// built as released, a cold machine compiles those hundreds of packages once per module.
// Built with one module's versions of what they share, the Go build cache holds them once:
// on a fresh machine csi-attacher then compiled 55 packages instead of 483 and CoreDNS 767
// instead of 1,072 (the images took 6.4 minutes cold instead of 9.5).

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
// versions of the modules both use: a module the target replaces is replaced by base's
// version instead; any other is required at base's version where that is newer (minimal
// version selection keeps a newer one the target needs). Sorted, for a stable go.mod.
func alignEdits(mods []moduleVersion, base buildList) []string {
	var edits []string
	for _, m := range mods {
		want, ok := base[m.path]
		if !ok {
			continue
		}
		switch {
		case m.replaced && m.replacedVersion == "":
			// replaced by a directory: the module's own code, left alone
		case m.replaced:
			if m.replacedVersion != want {
				edits = append(edits, "-replace="+m.path+"="+m.path+"@"+want)
			}
		case semver.Compare(want, m.version) > 0:
			edits = append(edits, "-require="+m.path+"@"+want)
		}
	}
	sort.Strings(edits)
	return edits
}

// moduleBuildList is the build list of b's module as released: its go.mod and go.sum
// alone, in a directory of their own, are enough for the module graph.
func moduleBuildList(ctx context.Context, b moduleBinary) (buildList, error) {
	mod, err := goModDownload(ctx, b.module+"@"+b.version)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "nodeagent-modlist-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for _, name := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(mod.Dir, name))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	mods, err := listModules(ctx, dir)
	if err != nil {
		return nil, err
	}
	return selected(mods), nil
}

// alignModule edits the go.mod of the module copy in src onto the versions b.alignWith's
// module builds with.
func alignModule(ctx context.Context, src string, b moduleBinary) error {
	base, err := moduleBuildList(ctx, *b.alignWith)
	if err != nil {
		return fmt.Errorf("%s's build list: %w", b.alignWith.name, err)
	}
	return alignTo(ctx, src, base)
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
	return alignTo(ctx, src, selected(mods))
}

// alignTo edits the go.mod in src onto base's versions (alignEdits).
func alignTo(ctx context.Context, src string, base buildList) error {
	mods, err := listModules(ctx, src)
	if err != nil {
		return err
	}
	edits := alignEdits(mods, base)
	if len(edits) == 0 {
		return nil
	}
	return goCmdIn(ctx, src, nil, append([]string{"mod", "edit"}, edits...)...)
}
