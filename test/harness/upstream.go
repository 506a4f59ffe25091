package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
)

// Pinned versions of what the harness builds besides Kubernetes itself. Kubernetes' own
// version is read from the agent's go.mod (the one place it is written); etcd follows the
// version that Kubernetes' go.mod requires, which is the one it is tested with.
const (
	ContainerdVersion = "v2.4.2"
	// RuncVersion is the runc the built containerd runs: Debian 12's 1.1.5 cannot make
	// idmapped mounts, without which containerd reports no user-namespace support.
	RuncVersion   = "v1.5.2"
	PauseTag      = "3.10.2"
	BusyboxE2ETag = "1.37.0-2"
	AgnhostTag    = "2.66.1"
)

// KubeVersion returns the pinned upstream release (v1.37.1), derived from the version of
// k8s.io/client-go in the agent's go.mod, and checks that every k8s.io staging module there
// shares it.
func KubeVersion(repoDir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(repoDir, "go.mod"))
	if err != nil {
		return "", err
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return "", err
	}
	return kubeVersionOf(f)
}

// stagingModules are the k8s.io modules released in lockstep with Kubernetes.
var stagingModules = map[string]bool{
	"k8s.io/api": true, "k8s.io/apimachinery": true, "k8s.io/client-go": true,
	"k8s.io/cri-api": true, "k8s.io/kubelet": true, "k8s.io/component-base": true,
	"k8s.io/component-helpers": true, "k8s.io/apiserver": true, "k8s.io/cri-client": true,
	"k8s.io/mount-utils": true, "k8s.io/cri-streaming": true, "k8s.io/streaming": true,
}

func kubeVersionOf(f *modfile.File) (string, error) {
	var staging string
	for _, r := range f.Require {
		if !stagingModules[r.Mod.Path] {
			continue
		}
		if staging == "" {
			staging = r.Mod.Version
		} else if r.Mod.Version != staging {
			return "", fmt.Errorf("go.mod: %s is at %s but other k8s.io staging modules at %s: pin them to one release", r.Mod.Path, r.Mod.Version, staging)
		}
	}
	if !strings.HasPrefix(staging, "v0.") {
		return "", fmt.Errorf("go.mod: no k8s.io staging module at a v0.x release (found %q)", staging)
	}
	return "v1." + strings.TrimPrefix(staging, "v0."), nil
}

// upstreamBinaries are the main packages built from k8s.io/kubernetes (plus etcd), by the
// name of the binary they produce.
var upstreamBinaries = map[string]string{
	"etcd":                    "go.etcd.io/etcd/server/v3",
	"kube-apiserver":          "k8s.io/kubernetes/cmd/kube-apiserver",
	"kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
	"kube-scheduler":          "k8s.io/kubernetes/cmd/kube-scheduler",
	"kubectl":                 "k8s.io/kubernetes/cmd/kubectl",
	"kubeadm":                 "k8s.io/kubernetes/cmd/kubeadm",
	"kubelet":                 "k8s.io/kubernetes/cmd/kubelet",
	"kube-proxy":              "k8s.io/kubernetes/cmd/kube-proxy",
	"agnhost":                 "k8s.io/kubernetes/test/images/agnhost",
}

// kubeletOnDemand is the upstream binary built only for a cluster that runs it (the node
// agent AgentKubelet, or SwitchAgent to it): make test never does, and its own packages
// are over a minute of a cold build on 2 cores.
const kubeletOnDemand = "kubelet"

// EnsureUpstream builds the upstream binaries of the pinned version into the cache unless a
// previous run did, and returns their directory. The kubelet is among them only when the
// cluster's node agent is the kubelet (EnsureKubelet builds it later).
func (c *Config) EnsureUpstream(ctx context.Context) (_ string, err error) {
	want := map[string]string{}
	for name, pkg := range upstreamBinaries {
		if name != kubeletOnDemand || c.Agent == AgentKubelet {
			want[name] = pkg
		}
	}
	return c.ensureUpstream(ctx, want)
}

// EnsureKubelet builds the upstream kubelet into the upstream bin dir unless a previous run
// did (after EnsureUpstream, only its own packages compile), and returns the bin dir.
func (c *Config) EnsureKubelet(ctx context.Context) (string, error) {
	return c.ensureUpstream(ctx, map[string]string{kubeletOnDemand: upstreamBinaries[kubeletOnDemand]})
}

// ensureUpstream builds the binaries of want (a subset of upstreamBinaries) that the cache
// lacks.
func (c *Config) ensureUpstream(ctx context.Context, want map[string]string) (_ string, err error) {
	version, err := KubeVersion(c.RepoDir)
	if err != nil {
		return "", err
	}
	root := filepath.Join(c.CacheDir, "upstream-"+version)
	bin := filepath.Join(root, "bin")
	if complete(bin, want) {
		return bin, nil
	}
	todo := missingBinaries(bin, want) // a binary added to the list is built alone
	estimate := "about 12 minutes on 2 cores"
	if _, ok := todo["kube-apiserver"]; !ok {
		estimate = "a few minutes at most"
	}
	p := c.startBuild("upstream "+version, binaryNames(todo), estimate)
	defer func() { p.end(err) }()
	p.setPhase("downloading modules")
	staging := "v0." + strings.TrimPrefix(version, "v1.")
	src := filepath.Join(root, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	// The tools module: k8s.io/kubernetes at the pinned release, with every staging module
	// replaced by its published version (k8s.io/kubernetes points them at ./staging).
	mod, err := goModDownload(ctx, "k8s.io/kubernetes@"+version)
	if err != nil {
		return "", err
	}
	kubeMod, err := os.ReadFile(mod.GoMod)
	if err != nil {
		return "", err
	}
	kf, err := modfile.Parse("go.mod", kubeMod, nil)
	if err != nil {
		return "", err
	}
	var gomod strings.Builder
	fmt.Fprintf(&gomod, "module nodeagent.local/upstream\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n", kf.Go.Version, version)
	for _, r := range kf.Replace {
		if strings.HasPrefix(r.New.Path, "./staging/") {
			fmt.Fprintf(&gomod, "\t%s => %s %s\n", r.Old.Path, r.Old.Path, staging)
		}
	}
	gomod.WriteString(")\n")
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
	for _, pkg := range upstreamBinaries {
		fmt.Fprintf(&tools, "\t_ %q\n", pkg)
	}
	tools.WriteString(")\n")
	if err := writeFiles(src, map[string]string{"go.mod": gomod.String(), "tools.go": tools.String()}); err != nil {
		return "", err
	}
	// With the project's own versions of what both use where those are newer, and without
	// -trimpath (goBuild below): as the unit tests build the project's packages, so that
	// the packages both use are compiled once (modalign.go).
	if err := alignWithRepo(ctx, src, c.RepoDir); err != nil {
		return "", err
	}
	if err := c.goCmd(ctx, src, nil, "mod", "tidy"); err != nil {
		return "", err
	}
	ld := "-s -w"
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		minor := strings.SplitN(strings.TrimPrefix(version, "v1."), ".", 2)[0]
		ld += fmt.Sprintf(" -X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=1 -X %[1]s.gitMinor=%[3]s -X %[1]s.gitTreeState=clean -X %[1]s.buildDate=%[4]s",
			p, version, minor, time.Now().UTC().Format(time.RFC3339))
	}
	if err := goBuild(ctx, p, src, bin, ld, nil, todo); err != nil {
		return "", err
	}
	return bin, nil
}

// EnsureContainerd builds containerd v2, its runc shim and ctr into the cache.
func (c *Config) EnsureContainerd(ctx context.Context) (_ string, err error) {
	root := filepath.Join(c.CacheDir, "containerd-"+ContainerdVersion)
	bin := filepath.Join(root, "bin")
	const mod = "github.com/containerd/containerd/v2"
	bins := map[string]string{
		"containerd":              mod + "/cmd/containerd",
		"containerd-shim-runc-v2": mod + "/cmd/containerd-shim-runc-v2",
		"ctr":                     mod + "/cmd/ctr",
	}
	if complete(bin, bins) {
		return bin, nil
	}
	p := c.startBuild("containerd "+ContainerdVersion, binaryNames(bins), "about 2.5 minutes on 2 cores")
	defer func() { p.end(err) }()
	p.setPhase("downloading modules")
	src := filepath.Join(root, "src")
	gomod := fmt.Sprintf("module nodeagent.local/containerd\n\ngo 1.26.0\n\nrequire %s %s\n", mod, ContainerdVersion)
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
	for _, pkg := range bins {
		fmt.Fprintf(&tools, "\t_ %q\n", pkg)
	}
	tools.WriteString(")\n")
	if err := writeFiles(src, map[string]string{"go.mod": gomod, "tools.go": tools.String()}); err != nil {
		return "", err
	}
	if err := c.goCmd(ctx, src, nil, "mod", "tidy"); err != nil {
		return "", err
	}
	ld := "-s -w -X " + mod + "/version.Version=" + ContainerdVersion
	if err := goBuild(ctx, p, src, bin, ld, []string{"-trimpath", "-tags", "no_btrfs,no_devmapper,no_zfs"}, bins); err != nil {
		return "", err
	}
	return bin, nil
}

// EnsureRunc builds runc into the cache: with cgo and libseccomp (from the harness's
// Debian packages), as runc's own releases are built.
func (c *Config) EnsureRunc(ctx context.Context) (_ string, err error) {
	root := filepath.Join(c.CacheDir, "runc-"+RuncVersion)
	bin := filepath.Join(root, "bin")
	const mod = "github.com/opencontainers/runc"
	bins := map[string]string{"runc": mod}
	if complete(bin, bins) {
		return filepath.Join(bin, "runc"), nil
	}
	if err := c.ensurePackages(ctx); err != nil {
		return "", err
	}
	p := c.startBuild("runc "+RuncVersion, binaryNames(bins), "about a minute on 2 cores")
	defer func() { p.end(err) }()
	p.setPhase("downloading modules")
	src := filepath.Join(root, "src")
	gomod := fmt.Sprintf("module nodeagent.local/runc\n\ngo 1.26.0\n\nrequire %s %s\n", mod, RuncVersion)
	tools := fmt.Sprintf("//go:build tools\n\npackage tools\n\nimport _ %q\n", mod)
	if err := writeFiles(src, map[string]string{"go.mod": gomod, "tools.go": tools}); err != nil {
		return "", err
	}
	if err := c.goCmd(ctx, src, nil, "mod", "tidy"); err != nil {
		return "", err
	}
	ld := "-s -w -X main.version=" + strings.TrimPrefix(RuncVersion, "v")
	if err := goBuildEnv(ctx, p, src, bin, ld, []string{"CGO_ENABLED=1"}, []string{"-trimpath", "-tags", "seccomp urfave_cli_no_docs"}, bins); err != nil {
		return "", err
	}
	return filepath.Join(bin, "runc"), nil
}

// goBuild builds every package into a temporary directory and renames it into place, so a
// build cut short never leaves a half-filled bin dir that looks complete. One go build makes
// them all, which keeps the cores busy; p counts the packages it compiles (-v) and notes each
// binary as it appears. extra are more build flags (-trimpath, -tags).
func goBuild(ctx context.Context, p *buildProgress, src, bin, ldflags string, extra []string, pkgs map[string]string) error {
	return goBuildEnv(ctx, p, src, bin, ldflags, []string{"CGO_ENABLED=0"}, extra, pkgs)
}

// goBuildEnv is goBuild with the build's environment given.
func goBuildEnv(ctx context.Context, p *buildProgress, src, bin, ldflags string, env, extra []string, pkgs map[string]string) error {
	tmp := bin + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	var paths []string
	for _, pkg := range pkgs {
		paths = append(paths, pkg)
	}
	sort.Strings(paths)
	flags := extra
	p.setPhase("")
	p.expect(packagesToCompile(ctx, src, env, flags, paths...))
	p.watchFiles(binaryFiles(tmp, pkgs))
	args := append(append([]string{"go", "build", "-v", "-ldflags", ldflags, "-o", tmp + "/"}, flags...), paths...)
	if err := runBuild(ctx, src, env, p, args...); err != nil {
		return err
	}
	for name, pkg := range pkgs {
		if base := goBinaryName(pkg); base != name {
			if err := os.Rename(filepath.Join(tmp, base), filepath.Join(tmp, name)); err != nil {
				return err
			}
		}
	}
	return installBinaries(tmp, bin, pkgs)
}

// binaryNames are the names of the binaries of pkgs (name -> package), sorted.
func binaryNames(pkgs map[string]string) []string {
	var names []string
	for name := range pkgs {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// moduleInfo is what `go mod download -json` tells of a module.
type moduleInfo struct {
	GoMod string // path of its go.mod in the module cache
	Dir   string // its extracted source
}

// kubernetesModule downloads (or finds in the module cache) k8s.io/kubernetes at the
// pinned release, for its manifests and sources; version is that release.
func (c *Config) kubernetesModule(ctx context.Context) (version string, mod moduleInfo, err error) {
	if version, err = KubeVersion(c.RepoDir); err != nil {
		return "", moduleInfo{}, err
	}
	mod, err = goModDownload(ctx, "k8s.io/kubernetes@"+version)
	return version, mod, err
}

func goModDownload(ctx context.Context, modVersion string) (moduleInfo, error) {
	var info moduleInfo
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", modVersion)
	cmd.Dir = os.TempDir() // outside any module: nothing's go.mod is touched
	out, err := cmd.Output()
	if err != nil {
		return info, fmt.Errorf("go mod download %s: %w", modVersion, err)
	}
	return info, jsonUnmarshal(out, &info)
}

func (c *Config) goCmd(ctx context.Context, dir string, env []string, args ...string) error {
	return goCmdIn(ctx, dir, env, args...)
}

// goCmdIn runs the go tool in dir, outside any workspace.
func goCmdIn(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args[:1], " "), dir, err, tail(out, 4000))
	}
	return nil
}

func complete(bin string, names map[string]string) bool {
	for name := range names {
		if st, err := os.Stat(filepath.Join(bin, name)); err != nil || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func writeFiles(dir string, files map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// conformanceSuites are the packages k8s.io/kubernetes/test/e2e's test binary links in
// (its e2e_test.go imports them); the tools module must require what they need, or
// `go test -c` finds modules missing from go.sum.
var conformanceSuites = []string{
	"github.com/onsi/ginkgo/v2/ginkgo",
	"k8s.io/kubernetes/test/conformance/testdata",
	"k8s.io/kubernetes/test/e2e",
	"k8s.io/kubernetes/test/e2e/apimachinery", "k8s.io/kubernetes/test/e2e/apps",
	"k8s.io/kubernetes/test/e2e/architecture", "k8s.io/kubernetes/test/e2e/auth",
	"k8s.io/kubernetes/test/e2e/autoscaling", "k8s.io/kubernetes/test/e2e/common",
	"k8s.io/kubernetes/test/e2e/dra", "k8s.io/kubernetes/test/e2e/instrumentation",
	"k8s.io/kubernetes/test/e2e/invariants", "k8s.io/kubernetes/test/e2e/kubectl",
	"k8s.io/kubernetes/test/e2e/network", "k8s.io/kubernetes/test/e2e/node",
	"k8s.io/kubernetes/test/e2e/scheduling", "k8s.io/kubernetes/test/e2e/storage",
	"k8s.io/kubernetes/test/e2e/storage/csimock", "k8s.io/kubernetes/test/e2e/storage/external",
	"k8s.io/kubernetes/test/e2e/windows", "k8s.io/kubernetes/test/e2e/framework/debug/init",
	"k8s.io/kubernetes/test/e2e/framework/metrics/init", "k8s.io/kubernetes/test/e2e/framework/node/init",
	"k8s.io/kubernetes/test/e2e/testing-manifests", "k8s.io/kubernetes/test/fixtures",
	"k8s.io/kubernetes/test/utils/ktesting/format",
}

// EnsureConformance builds the upstream conformance suite (e2e.test) and the ginkgo CLI at
// the pinned version into the upstream bin dir, after EnsureUpstream. The first build takes
// about 4 minutes on 2 cores (make test starts it in the background before the suites that
// leave the machine idle, harness build-conformance); a second process waits for it.
func (c *Config) EnsureConformance(ctx context.Context) (_ string, err error) {
	bin, err := c.EnsureUpstream(ctx)
	if err != nil {
		return "", err
	}
	suite := map[string]string{"e2e.test": "", "ginkgo": ""}
	if complete(bin, suite) {
		return bin, nil
	}
	unlock, err := c.lockBuild("conformance-suite")
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(bin, suite) { // built by the process we waited for
		return bin, nil
	}
	version, err := KubeVersion(c.RepoDir)
	if err != nil {
		return "", err
	}
	p := c.startBuild("conformance suite "+version, []string{"e2e.test", "ginkgo"}, "about 4 minutes on 2 cores")
	defer func() { p.end(err) }()
	p.setPhase("downloading modules")
	src := filepath.Join(c.CacheDir, "upstream-"+version, "src")
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
	for _, pkg := range conformanceSuites {
		fmt.Fprintf(&tools, "\t_ %q\n", pkg)
	}
	tools.WriteString(")\n")
	if err := writeFiles(src, map[string]string{"tools_e2e.go": tools.String()}); err != nil {
		return "", err
	}
	if err := c.goCmd(ctx, src, nil, "mod", "tidy"); err != nil {
		return "", err
	}
	// The suites' packages first, with go build -v so that the packages can be counted as
	// they compile (go test -c has no such output); go test -c then finds them in the build
	// cache and compiles only the test package itself before linking.
	env := []string{"CGO_ENABLED=0"}
	p.setPhase("")
	p.expect(packagesToCompile(ctx, src, env, nil, conformanceSuites...))
	if err := runBuild(ctx, src, env, p, append([]string{"go", "build", "-v"}, conformanceSuites...)...); err != nil {
		return "", err
	}
	minor := strings.SplitN(strings.TrimPrefix(version, "v1."), ".", 2)[0]
	ld := fmt.Sprintf("-s -w -X k8s.io/component-base/version.gitVersion=%s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=%s", version, minor)
	for _, step := range []struct {
		item string
		args []string
	}{
		{"e2e.test", []string{"go", "test", "-c", "-ldflags", ld, "-o", filepath.Join(bin, "e2e.test.tmp"), "k8s.io/kubernetes/test/e2e"}},
		{"ginkgo", []string{"go", "build", "-v", "-o", filepath.Join(bin, "ginkgo"), "github.com/onsi/ginkgo/v2/ginkgo"}},
	} {
		p.setPhase("linking " + step.item)
		if err := runBuild(ctx, src, env, p, step.args...); err != nil {
			return "", err
		}
		p.built(step.item)
	}
	return bin, os.Rename(filepath.Join(bin, "e2e.test.tmp"), filepath.Join(bin, "e2e.test"))
}
