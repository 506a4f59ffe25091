// Command bench measures pod startup, deletion and footprint of nodeagent side by side with
// the upstream kubelet, on one harness cluster (same control plane, containerd and
// KubeletConfiguration), alternating the two sides over several rounds, and the floor: the
// same pods made straight through CRI with no agent. With -pvc every pod mounts a fresh claim
// of the hostpath CSI driver, on both agents (no floor). See BENCHMARKS.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/harness"
)

type options struct {
	n      int
	rounds int
	hold   time.Duration
	sides  []string
	outDir string
	// probe gives every pod an exec readiness probe running each second.
	probe bool
	// pvc gives every pod a fresh claim of the hostpath CSI driver, mounted (pvc.go); the
	// cluster runs the driver, and there is no floor.
	pvc bool
	// profile, when set, is the length of a CPU profile of nodeagent taken from the start
	// of its first round, written beside the JSON results.
	profile time.Duration
}

func main() {
	var o options
	var sides string
	flag.IntVar(&o.n, "n", 100, "pods created at once per round (at most maxPods, 110)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; the order of the sides alternates between rounds")
	flag.DurationVar(&o.hold, "hold", 60*time.Second, "how long CPU is measured idle and with N pods running")
	flag.StringVar(&sides, "sides", "nodeagent,kubelet,floor", "what to measure")
	flag.StringVar(&o.outDir, "out", "bench/results", "directory for the JSON results")
	flag.BoolVar(&o.probe, "probe", false, "give every pod an exec readiness probe run each second (the probes' cost shows in CPU with pods)")
	flag.BoolVar(&o.pvc, "pvc", false, "give every pod a fresh 1Mi claim of the hostpath CSI driver's StorageClass ("+harness.CSIHostpathStorageClass+"), mounted; the cluster runs the driver (one more pod: N at most 109); sides nodeagent,kubelet")
	flag.DurationVar(&o.profile, "profile", 0, "take a CPU profile of nodeagent this long from the start of its first round (bench/results/nodeagent-cpu.pprof)")
	flag.Parse()
	sidesSet := false
	flag.Visit(func(f *flag.Flag) { sidesSet = sidesSet || f.Name == "sides" })
	if o.pvc && !sidesSet {
		sides = harness.AgentNodeagent + "," + harness.AgentKubelet
	}
	o.sides = strings.Split(sides, ",")
	if o.pvc && slices.Contains(o.sides, "floor") {
		fmt.Fprintln(os.Stderr, "bench: the floor (CRI only) has no volumes: -pvc measures nodeagent and kubelet")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	cfg := &harness.Config{Agent: harness.AgentNone}
	if o.pvc {
		// The driver runs as a pod: it is deployed by a node agent, and each side's agent
		// runs it again after the switch.
		cfg = &harness.Config{Agent: harness.AgentNodeagent, CSIHostpath: true}
	}
	if err := harness.Up(ctx, cfg); err != nil {
		return err
	}
	defer func() { _ = harness.Down(context.Background(), cfg) }()
	cs, err := cfg.Client()
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// Pods are admitted once the namespace's default service account exists.
	if err := waitServiceAccount(ctx, cfg); err != nil {
		return err
	}

	results := map[string]sideResult{}
	for round := range o.rounds {
		order := append([]string(nil), o.sides...)
		if round%2 == 1 {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for _, side := range order {
			fmt.Fprintf(os.Stderr, "bench: round %d/%d: %s, %d pods\n", round+1, o.rounds, side, o.n)
			r := results[side]
			if err := measure(ctx, cfg, side, o, &r); err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("round %d: %v", round+1, err))
				fmt.Fprintf(os.Stderr, "bench: %s round %d: %v\n", side, round+1, err)
				// Leave an empty runtime and apiserver for the next side.
				_ = cs.CoreV1().Pods(benchNamespace).DeleteCollection(ctx, *metav1.NewDeleteOptions(0), metav1.ListOptions{})
				if o.pvc {
					_ = cs.CoreV1().PersistentVolumeClaims(benchNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
				}
				_ = cfg.SwitchAgent(ctx, harness.AgentNone)
			}
			results[side] = r
		}
	}
	writeTable(os.Stdout, figuresFor(o.pvc), results)
	writeStepTable(os.Stdout, results)
	return writeJSON(cfg, o, results)
}

// measure runs one round of one side and adds its figures to r.
func measure(ctx context.Context, cfg *harness.Config, side string, o options, r *sideResult) error {
	rt, _, closeFn, err := cfg.CRI(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	cs, err := cfg.Client()
	if err != nil {
		return err
	}
	if side == "floor" {
		if err := cfg.SwitchAgent(ctx, harness.AgentNone); err != nil {
			return err
		}
		res, err := floorRound(ctx, rt, cfg.RunDir, o.n)
		if err != nil {
			return err
		}
		r.Rounds = append(r.Rounds, res)
		return nil
	}
	switched := time.Now()
	if err := cfg.SwitchAgent(ctx, side); err != nil {
		return err
	}
	if o.pvc {
		// Before the idle hold, which so includes the driver's pod and gives the agent's
		// registration of the driver time to end.
		if err := cfg.WaitCSIHostpath(ctx, switched); err != nil {
			return fmt.Errorf("the CSI driver under %s: %w", side, err)
		}
	}
	pid := cfg.AgentPid()
	// The idle hold doubles as the new agent's settling time.
	cpu0, _ := cpuSeconds(pid)
	if err := sleep(ctx, o.hold); err != nil {
		return err
	}
	cpu1, _ := cpuSeconds(pid)
	rssIdle, _, _ := memory(pid)
	mark := markAudit(cfg.AuditLog())
	profiled := make(chan error, 1)
	if side == harness.AgentNodeagent && o.profile > 0 && len(r.Rounds) == 0 {
		go func() {
			profiled <- cpuProfile(ctx, cs, o.profile, filepath.Join(o.outDir, "nodeagent-cpu.pprof"))
		}()
	} else {
		profiled <- nil
	}
	w := workload{n: o.n, probe: o.probe, pvc: o.pvc, rootDir: cfg.AgentRootDir(), timelines: side == harness.AgentNodeagent}
	res, err := startupRound(ctx, cs, rt, w, func() error {
		rss, _, _ := memory(pid)
		r.RSSPods = append(r.RSSPods, rss)
		c0, _ := cpuSeconds(pid)
		if err := sleep(ctx, o.hold); err != nil {
			return err
		}
		c1, _ := cpuSeconds(pid)
		r.CPUPods = append(r.CPUPods, c1-c0)
		return nil
	})
	if perr := <-profiled; perr != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", perr)
	}
	if err != nil {
		return err
	}
	reqs, byKind, err := countRequests(cfg.AuditLog(), mark, markAudit(cfg.AuditLog()))
	if err != nil {
		return err
	}
	rssAfter, hwm, _ := memory(pid)
	r.Rounds = append(r.Rounds, res)
	r.RSSIdle = append(r.RSSIdle, rssIdle)
	r.CPUIdle = append(r.CPUIdle, cpu1-cpu0)
	r.RSSAfter = append(r.RSSAfter, rssAfter)
	r.HWM = append(r.HWM, hwm)
	r.Requests = append(r.Requests, float64(reqs))
	r.RequestsBy = append(r.RequestsBy, byKind)
	r.Available = true
	return nil
}

func waitServiceAccount(ctx context.Context, cfg *harness.Config) error {
	cs, err := cfg.Client()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := cs.CoreV1().ServiceAccounts(benchNamespace).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("service account %s/default: %w", benchNamespace, err)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func writeJSON(cfg *harness.Config, o options, results map[string]sideResult) error {
	version, _ := harness.KubeVersion(cfg.RepoDir)
	commit, _ := exec.Command("git", "-C", cfg.RepoDir, "rev-parse", "--short", "HEAD").Output()
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	var mem int64
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		fmt.Sscanf(strings.SplitN(string(data), "\n", 2)[0], "MemTotal: %d kB", &mem)
	}
	out := map[string]any{
		"time":    time.Now().UTC().Format(time.RFC3339),
		"machine": map[string]any{"cores": runtime.NumCPU(), "memoryMiB": mem / 1024, "kernel": strings.TrimSpace(string(kernel))},
		"versions": map[string]string{
			"kubernetes": version, "containerd": harness.ContainerdVersion, "nodeagent": strings.TrimSpace(string(commit)),
		},
		"pods": o.n, "rounds": o.rounds, "holdSeconds": o.hold.Seconds(), "execReadinessProbe": o.probe, "pvc": o.pvc,
		"results": results,
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(cfg.RepoDir, o.outDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, time.Now().UTC().Format("20060102-150405")+".json")
	fmt.Fprintf(os.Stderr, "bench: results in %s\n", path)
	return os.WriteFile(path, data, 0o644)
}
