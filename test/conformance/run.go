// Package conformance runs the upstream Kubernetes conformance suite (e2e.test, through the
// ginkgo CLI, both built at the pinned release) against a harness cluster whose node is
// nodeagent or the upstream kubelet, and summarises its JUnit report.
package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodeagent/nodeagent/test/harness"
)

// DefaultFocus selects the [Conformance] specs of sig-node, those of sig-storage that
// use node-local volumes, and the driver-free CSI API specs (CSIDriver, CSINode,
// VolumeAttachment, CSIStorageCapacity objects).
const DefaultFocus = `\[sig-node\].*\[Conformance\]|\[sig-storage\] (ConfigMap|Secrets|Projected|Downward API|EmptyDir|HostPath|Subpath|CSIInlineVolumes|VolumeAttachment|CSIStorageCapacity|CSINodes)\b.*\[Conformance\]`

// DefaultSkip leaves out what cannot share one node with other specs, and what upstream
// itself marks unreliable. The suite skips specs that need more nodes than the cluster has.
const DefaultSkip = `\[Serial\]|\[Disruptive\]|\[Flaky\]`

// ScopeAll (Options.Scope) runs every [Conformance] spec of the release on a cluster of two
// nodes with kube-proxy and cluster DNS: first every spec that may share the cluster, in
// parallel, then the [Serial] ones alone, one at a time.
const ScopeAll = "all"

// ScopeNode (Options.Scope) runs the wider node suite: the [NodeConformance] specs that are
// not [Conformance], on two nodes, leaving out what cannot share the cluster, what upstream
// marks slow, unreliable or alpha, specs of named features, and resize (which the focus's
// [Conformance] resize specs cover).
const ScopeNode = "node"

const (
	nodeFocus = `\[NodeConformance\]`
	nodeSkip  = `\[Conformance\]|\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Alpha\]|\[Feature:|[Rr]esize`
)

// ScopeCSIMock (Options.Scope) runs the upstream `[sig-storage] CSI Mock` specs that can
// run on one node with the harness's images: the mock CSI driver they deploy per spec, with
// its sidecars, is made of stand-ins and built sidecars (see harness.CSIMockImageRefs).
const ScopeCSIMock = "csimock"

// The CSI Mock specs left out, each for a reason of its own:
//   - [Serial], [Disruptive]: they cannot share the cluster (the kubelet restart spec, the
//     SELinux metrics specs); [Flaky]: upstream marks them unreliable (none at v1.37.1);
//   - [Feature:SELinux]: they need nodes with SELinux enforcing, which this machine's
//     kernel has not;
//   - [Feature:OffByDefault]: they need a feature gate that is off by default
//     (CSIVolumeHealth, alpha), which the harness does not turn on;
//
// The [Feature:VolumeSnapshotDataSource] specs run: the scope installs the snapshot CRDs
// and controller (harness.Config.VolumeSnapshots), and csi-snapshotter is built. The
// "CSI Mock volume expansion" specs run with the project's csi-resizer
// (test/images/csi-resizer), the resizer's module being refused by the Go module proxy.
// The [Feature:StorageCapacityScoring] specs run: their feature gate is on by default at
// v1.37, and the three of them that compare two nodes skip themselves on one.
const (
	csiMockFocus = `\[sig-storage\] CSI Mock`
	csiMockSkip  = `\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Feature:SELinux\]|\[Feature:OffByDefault\]`
)

const (
	allFocus        = `\[Conformance\]`
	allParallelSkip = `\[Serial\]|\[Disruptive\]|\[Flaky\]`
	allSerialFocus  = `\[Serial\].*\[Conformance\]|\[Conformance\].*\[Serial\]`
	allSerialSkip   = `\[Disruptive\]|\[Flaky\]`
	serialDir       = "serial" // the serial pass's report, below the run's results
)

// SmokeSpecs are a few fast, reliable conformance specs that touch the main paths of a
// node: a pod's status, its environment, the downward API, logs, and the configMap,
// secret and emptyDir volumes; and four CSI Mock specs, each deploying the mock driver
// and its sidecars: an inline ephemeral volume with the pod's details in its volume
// context, a volume attached before it is staged, NodeStage failures answered
// through the proxy to the mock inside e2e.test, then a NodeUnstage; a claim grown
// while its pod runs, through the project's csi-resizer and the node's NodeExpandVolume;
// and a snapshot of a pod's claim taken and deleted through csi-snapshotter and the
// snapshot controller, whose metrics the spec reads (Options.VolumeSnapshots).
var SmokeSpecs = []string{
	"[sig-node] Pods should get a host IP [Conformance] [NodeConformance]",
	"[sig-node] Downward API should provide pod name, namespace and IP address as env vars [Conformance] [NodeConformance]",
	"[sig-node] Variable Expansion should allow composing env vars into new env vars [Conformance] [NodeConformance]",
	"[sig-node] Containers should be able to override the image's default command (container entrypoint) [Conformance] [NodeConformance]",
	"[sig-node] Kubelet when scheduling a busybox command in a pod should print the output to logs [Conformance] [NodeConformance]",
	"[sig-storage] ConfigMap should be consumable from pods in volume [Conformance] [NodeConformance]",
	"[sig-storage] Secrets should be consumable from pods in volume [Conformance] [NodeConformance]",
	"[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [Conformance] [NodeConformance]",
	"[sig-storage] CSI Mock workload info CSI workload information using mock driver contain ephemeral=true when using inline volume",
	"[sig-storage] CSI Mock volume attach CSI attach test using mock driver should require VolumeAttach for drivers with attachment",
	"[sig-storage] CSI Mock volume node stage CSI NodeStage error cases should call NodeUnstage after NodeStage success [Slow]",
	"[sig-storage] CSI Mock volume expansion CSI online volume expansion should expand volume without restarting pod if attach=off, nodeExpansion=on",
	"[sig-storage] CSI Mock volume snapshot CSI Snapshot Controller metrics [Feature:VolumeSnapshotDataSource] snapshot controller should emit dynamic CreateSnapshot, CreateSnapshotAndReady, and DeleteSnapshot metrics",
}

// SmokeFocus is the focus that selects exactly SmokeSpecs.
func SmokeFocus() string {
	quoted := make([]string, len(SmokeSpecs))
	for i, s := range SmokeSpecs {
		quoted[i] = regexp.QuoteMeta(s)
	}
	return strings.Join(quoted, "|")
}

// Options say what to run.
type Options struct {
	// Agent is the node: harness.AgentNodeagent or harness.AgentKubelet.
	Agent string
	// Scope is "" for the node-local focus (DefaultFocus, one node), ScopeAll, ScopeNode
	// or ScopeCSIMock.
	Scope string
	// Focus and Skip are ginkgo regular expressions on spec names. Default DefaultFocus
	// and DefaultSkip.
	Focus, Skip string
	// Procs is the number of ginkgo processes. Default two per core: the specs mostly
	// wait for pods.
	Procs int
	// Timeout bounds the suite (ginkgo --timeout). Default 3h.
	Timeout time.Duration
	// Name names the results directory under the harness's ConformanceDir. Default Agent.
	Name string
	// Out receives ginkgo's console output and progress. Default os.Stdout.
	Out io.Writer
	// FewImages skips the images that take a build of their own (the sample API server):
	// for the smoke run and ScopeCSIMock, whose specs do not use them.
	FewImages bool
	// CSIMockDrivers readies the cluster for the drivers the CSI Mock specs deploy: the
	// kubernetes Service, the sidecars built before the cluster comes up, the manifests'
	// images at their local names, one node. ScopeCSIMock sets it; so does the smoke run,
	// which has CSI Mock specs.
	CSIMockDrivers bool
	// DistroBusybox keeps Debian's busybox (harness.DebianBusybox) in the busybox and
	// agnhost images instead of building upstream's: for specs (the smoke's) none of which
	// sets an environment variable whose name is not a shell identifier, the one
	// difference between the two that the suite sees. It saves the 2 to 5 minutes of
	// building busybox from source on a new machine.
	DistroBusybox bool
	// VolumeSnapshots installs the VolumeSnapshot CRDs and the snapshot controller, and
	// builds csi-snapshotter, for the CSI Mock snapshot specs. ScopeCSIMock sets it.
	VolumeSnapshots bool
}

func (o *Options) complete() error {
	switch o.Agent {
	case "":
		o.Agent = harness.AgentNodeagent
	case harness.AgentNodeagent, harness.AgentKubelet:
	default:
		return fmt.Errorf("node %q: want %q or %q", o.Agent, harness.AgentNodeagent, harness.AgentKubelet)
	}
	switch o.Scope {
	case "":
		if o.Focus == "" {
			o.Focus = DefaultFocus
		}
		if o.Skip == "" {
			o.Skip = DefaultSkip
		}
	case ScopeAll:
		if o.Focus != "" || o.Skip != "" {
			return fmt.Errorf("scope %q sets its own focus and skip", o.Scope)
		}
		o.Focus, o.Skip = allFocus, allParallelSkip
	case ScopeNode:
		if o.Focus != "" || o.Skip != "" {
			return fmt.Errorf("scope %q sets its own focus and skip", o.Scope)
		}
		o.Focus, o.Skip = nodeFocus, nodeSkip
	case ScopeCSIMock:
		// A focus may narrow the scope to some of its groups: it starts with the scope's.
		if o.Focus != "" && !strings.HasPrefix(o.Focus, csiMockFocus) || o.Skip != "" {
			return fmt.Errorf("scope %q sets its own skip, and a focus only within %s", o.Scope, csiMockFocus)
		}
		if o.Focus == "" {
			o.Focus = csiMockFocus
		}
		o.Skip = csiMockSkip
		o.CSIMockDrivers, o.VolumeSnapshots = true, true
		// The CSI Mock specs use none of the images of a build of their own.
		o.FewImages = true
	default:
		return fmt.Errorf("scope %q: want empty, %q, %q or %q", o.Scope, ScopeAll, ScopeNode, ScopeCSIMock)
	}
	for _, re := range []string{o.Focus, o.Skip} {
		if _, err := regexp.Compile(re); err != nil {
			return fmt.Errorf("regexp %q: %w", re, err)
		}
	}
	if o.Procs <= 0 {
		o.Procs = 2 * runtime.NumCPU()
	}
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Hour
	}
	if o.Name == "" {
		o.Name = o.Agent
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	return nil
}

// Result is what a run leaves: the summary and where its files are.
type Result struct {
	*Summary
	// Dir holds junit_01.xml, summary.txt, ginkgo.log, images.txt, run.txt and the
	// cluster's logs/.
	Dir string
}

// Run builds what is missing (e2e.test, ginkgo, busybox), brings up a harness cluster with
// the chosen node, pushes the suite's images, runs the suite, tears the cluster down (also
// on failure or interruption) and summarises the JUnit report.
func Run(ctx context.Context, cfg *harness.Config, opts Options) (*Result, error) {
	if err := opts.complete(); err != nil {
		return nil, err
	}
	cfg.Agent = opts.Agent
	if (opts.Scope == ScopeAll || opts.Scope == ScopeNode) && cfg.NodeCount == 0 {
		cfg.NodeCount = 2
	}
	if opts.CSIMockDrivers {
		// The mock driver's sidecars reach the apiserver through the kubernetes Service.
		cfg.Services = true
	}
	if opts.VolumeSnapshots {
		cfg.VolumeSnapshots = true
	}
	if err := cfg.Complete(); err != nil {
		return nil, err
	}
	// The mock driver's pods run on the node the spec picks, and e2e.test rewrites their
	// paths to the one --kubelet-root-dir: one node.
	if opts.CSIMockDrivers && cfg.NodeCount != 1 {
		return nil, fmt.Errorf("the CSI Mock specs run on one node, not %d", cfg.NodeCount)
	}
	buildStart := time.Now()
	bin, err := cfg.EnsureConformance(ctx)
	if err != nil {
		return nil, fmt.Errorf("build the conformance suite: %w", err)
	}
	if !opts.DistroBusybox {
		if cfg.BusyboxBinary, err = cfg.EnsureBusybox(ctx); err != nil {
			return nil, fmt.Errorf("build busybox: %w", err)
		}
	}
	if opts.CSIMockDrivers {
		// Minutes each when cold: before the cluster comes up, not while it waits.
		if _, err := cfg.EnsureCSISidecars(ctx); err != nil {
			return nil, fmt.Errorf("build the CSI sidecars: %w", err)
		}
	}
	if opts.VolumeSnapshots {
		if _, err := cfg.EnsureSnapshotter(ctx); err != nil {
			return nil, fmt.Errorf("build external-snapshotter: %w", err)
		}
	}
	cfg.ReportBuilds(buildStart)
	dir := filepath.Join(cfg.ConformanceDir(), opts.Name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	repoList := filepath.Join(dir, "repo-list.yaml")
	if err := os.WriteFile(repoList, []byte(harness.ConformanceRepoList()), 0o644); err != nil {
		return nil, err
	}
	refs, err := listImages(ctx, bin, repoList)
	if err != nil {
		return nil, err
	}
	if opts.CSIMockDrivers {
		// The snapshotter only where snapshots are installed.
		var skip []string
		if !opts.VolumeSnapshots {
			skip = append(skip, harness.CSIMockSnapshotterManifest)
		}
		if refs, err = cfg.CSIMockImageRefs(ctx, refs, skip...); err != nil {
			return nil, fmt.Errorf("the CSI Mock manifests' images: %w", err)
		}
	}

	start := time.Now()
	upErr := harness.Up(ctx, cfg)
	defer func() {
		// Whatever happened, the cluster goes: with a context of its own, since ctx may
		// be the one that was cancelled.
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := harness.Down(dctx, cfg); err != nil {
			fmt.Fprintf(opts.Out, "conformance: teardown: %v\n", err)
		}
		if err := copyDir(cfg.LogDir(), filepath.Join(dir, "logs")); err != nil {
			fmt.Fprintf(opts.Out, "conformance: keep the cluster's logs: %v\n", err)
		}
	}()
	if upErr != nil {
		return nil, fmt.Errorf("bring up the cluster: %w", upErr)
	}
	pushed, missing, err := cfg.PushConformanceImages(ctx, bin, refs, !opts.FewImages)
	if err != nil {
		return nil, fmt.Errorf("push the suite's images: %w", err)
	}
	if err := writeImages(filepath.Join(dir, "images.txt"), pushed, missing); err != nil {
		return nil, err
	}
	runErr := runGinkgo(ctx, cfg, bin, dir, "ginkgo.log", repoList, opts.Focus, opts.Skip, opts.Procs, opts)
	meta := fmt.Sprintf("node: %s\nnodes: %d\ncommit: %s\nstarted: %s\nfocus: %s\nskip: %s\nprocs: %d\n",
		opts.Agent, cfg.NodeCount, gitCommit(cfg.RepoDir), start.UTC().Format(time.RFC3339), opts.Focus, opts.Skip, opts.Procs)
	if opts.Scope == ScopeAll && ctx.Err() == nil {
		serial := filepath.Join(dir, serialDir)
		if err := os.MkdirAll(serial, 0o755); err != nil {
			return nil, err
		}
		serialErr := runGinkgo(ctx, cfg, bin, serial, "ginkgo.log", repoList, allSerialFocus, allSerialSkip, 1, opts)
		runErr = errors.Join(runErr, serialErr)
		meta += fmt.Sprintf("serial focus: %s\nserial skip: %s\nserial procs: 1\n", allSerialFocus, allSerialSkip)
	}
	meta += fmt.Sprintf("duration: %s\n", time.Since(start).Round(time.Second))
	if err := os.WriteFile(filepath.Join(dir, "run.txt"), []byte(meta), 0o644); err != nil {
		return nil, err
	}
	sum, err := LoadSummary(dir)
	if err != nil {
		return nil, fmt.Errorf("%w (ginkgo: %v)", err, runErr)
	}
	var text bytes.Buffer
	if err := sum.WriteText(&text); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), text.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return &Result{Summary: sum, Dir: dir}, nil
}

// LoadSummary reads the JUnit report of a run's results dir: the parallel pass's, and the
// serial pass's below it when the run had one.
func LoadSummary(dir string) (*Summary, error) {
	var all *Summary
	for _, d := range []string{dir, filepath.Join(dir, serialDir)} {
		f, err := os.Open(filepath.Join(d, "junit_01.xml"))
		if errors.Is(err, os.ErrNotExist) && all != nil {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("no JUnit report: %w", err)
		}
		sum, err := ParseJUnit(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
		if all == nil {
			all = sum
			continue
		}
		all.Passed += sum.Passed
		all.Failed += sum.Failed
		all.Skipped += sum.Skipped
		all.Specs = append(all.Specs, sum.Specs...)
	}
	sort.SliceStable(all.Specs, func(i, j int) bool { return all.Specs[i].Name < all.Specs[j].Name })
	return all, nil
}

// listImages asks e2e.test which images the suite uses, as KUBE_TEST_REPO_LIST maps them.
func listImages(ctx context.Context, bin, repoList string) ([]string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "e2e.test"), "--list-images")
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+repoList)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("e2e.test --list-images: %w: %s", err, stderr.String())
	}
	var refs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.ContainsAny(l, " \t") {
			refs = append(refs, l)
		}
	}
	if len(refs) == 0 {
		return nil, errors.New("e2e.test --list-images listed no image")
	}
	return refs, nil
}

// runGinkgo runs e2e.test through the ginkgo CLI, its output both to opts.Out and to
// ginkgo.log. A failed spec makes ginkgo exit non-zero; that is the report's business, so
// the error only matters when no report was written.
func runGinkgo(ctx context.Context, cfg *harness.Config, bin, dir, logName, repoList, focus, skip string, procs int, opts Options) error {
	logf, err := os.Create(filepath.Join(dir, logName))
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{
		"--procs=" + strconv.Itoa(procs),
		"--timeout=" + opts.Timeout.String(),
		"--focus=" + focus,
		"--skip=" + skip,
		"--no-color",
		"--silence-skips",
		// A spec stuck this long prints where it waits.
		"--poll-progress-after=10m",
		"--poll-progress-interval=5m",
		filepath.Join(bin, "e2e.test"),
		"--",
		"--kubeconfig=" + cfg.Kubeconfig(),
		"--provider=skeleton",
		"--report-dir=" + dir,
		"--disable-log-dump",
		"--allowed-not-ready-nodes=0",
		"--node-os-distro=debian",
		// The storage specs' driver manifests name /var/lib/kubelet; e2e.test rewrites
		// it to the node's root dir, which is the same for either node.
		"--kubelet-root-dir=" + cfg.AgentRootDir(),
		"--e2e-output-dir=" + filepath.Join(dir, "output"),
		// Every node must be Ready, and the suite knows how many to expect.
		"--num-nodes=" + strconv.Itoa(cfg.NodeCount),
	}
	out := io.MultiWriter(opts.Out, logf)
	fmt.Fprintf(out, "conformance: ginkgo %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "ginkgo"), args...)
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+repoList, "KUBECONFIG="+cfg.Kubeconfig())
	cmd.Stdout, cmd.Stderr = out, out
	// Interrupted, ginkgo stops the specs, cleans up their namespaces and writes the report.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 2 * time.Minute
	// ginkgo and its e2e.test processes in a group of their own: a ginkgo killed past
	// WaitDelay would leave its e2e.test processes running, so the group goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // ESRCH when nothing is left
	}
	return err
}

func writeImages(path string, pushed []harness.ConformanceImage, missing []string) error {
	var b strings.Builder
	b.WriteString("# images of the e2e suite, as the harness provides them\n")
	for _, im := range pushed {
		kind := "built"
		if im.StandIn != "" {
			kind = "STAND-IN: " + im.StandIn
		}
		fmt.Fprintf(&b, "%s\n    %s\n", im.Ref, kind)
		if im.Note != "" {
			fmt.Fprintf(&b, "    note: %s\n", im.Note)
		}
	}
	b.WriteString("\n# not provided (a spec that pulls one of these fails to start its pod)\n")
	for _, m := range missing {
		fmt.Fprintf(&b, "%s\n", m)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func gitCommit(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		commit += "+dirty"
	}
	return commit
}

// copyDir copies the regular files of src (one level) into dst, but the apiserver's audit
// log, which is large and only the benchmark reads.
func copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == "audit.log" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
