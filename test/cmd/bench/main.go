// Command bench measures pod startup, deletion and footprint of nodeagent side by side with
// the upstream kubelet, on one harness cluster (same control plane, containerd and
// KubeletConfiguration), alternating the two sides over several rounds, and the floor: the
// same pods made straight through CRI with no agent. With -pvc every pod mounts a fresh claim
// of the hostpath CSI driver, on both agents (no floor). With -scale it measures each of
// several pod counts in turn, and how the agents' CPU per pod grows with the count. See
// BENCHMARKS.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/harness"
)

type options struct {
	// n is the pod count being measured: -n, or each of -scale's in turn.
	n int
	// ns are the pod counts of the run: -scale's, ascending, or -n alone.
	ns []int
	// scale: the run measures ns in turn and prints the scaling table (-scale).
	scale  bool
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
	// of the profiling round of each pod count, written beside the JSON results.
	profile time.Duration
	// heap writes nodeagent's heap profile at the end of its hold with the pods running,
	// in the profiling round of each pod count, beside the JSON results.
	heap bool
	// profileRunning takes a CPU profile of nodeagent over one more hold with the N pods
	// running, after the hold's figures (so not in them), in the profiling round of each pod
	// count: what a node of N settled pods costs, which a start profile mixes in.
	profileRunning bool
	// profiling marks the extra nodeagent round of a pod count that takes the profiles
	// above; its figures are not kept.
	profiling bool
	// strict makes a failed round fail the run (make test's smoke), after the results.
	strict bool
}

func main() {
	var o options
	var sides, scale string
	flag.IntVar(&o.n, "n", 100, fmt.Sprintf("pods created at once per round (at most %d: the node's pod CIDR; past 100 both agents' maxPods is raised to N+10)", maxBenchPods))
	flag.StringVar(&scale, "scale", "", "measure each of these pod counts in turn, e.g. 10,50,100,250 (each with -rounds rounds of -sides), and print how the agents' CPU per pod grows with N; instead of -n")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; the order of the sides alternates between rounds")
	flag.DurationVar(&o.hold, "hold", 60*time.Second, "how long CPU is measured idle and with N pods running")
	flag.StringVar(&sides, "sides", "nodeagent,kubelet,floor", "what to measure")
	flag.StringVar(&o.outDir, "out", "bench/results", "directory for the JSON results")
	flag.BoolVar(&o.probe, "probe", false, "give every pod an exec readiness probe run each second (the probes' cost shows in CPU with pods)")
	flag.BoolVar(&o.pvc, "pvc", false, "give every pod a fresh 1Mi claim of the hostpath CSI driver's StorageClass ("+harness.CSIHostpathStorageClass+"), mounted; the cluster runs the driver (one more pod); sides nodeagent,kubelet")
	flag.DurationVar(&o.profile, "profile", 0, "take a CPU profile of nodeagent this long from the start of one more nodeagent round after the others (its figures not counted), of each pod count (bench/results/nodeagent-cpu-<N>pods.pprof)")
	flag.BoolVar(&o.heap, "heap", false, "write nodeagent's heap profile (in use after a GC) at the end of its hold with N pods running, in the profiling round of each pod count (bench/results/nodeagent-heap-<N>pods.pprof)")
	flag.BoolVar(&o.profileRunning, "profile-running", false, "after the hold with N pods running, take a CPU profile of nodeagent over one more hold with them running, in the profiling round of each pod count (bench/results/nodeagent-cpu-running-<N>pods.pprof)")
	flag.BoolVar(&o.strict, "strict", false, "exit non-zero, after writing the results, when a round of a side failed (make test's smoke of the bench)")
	flag.Parse()
	sidesSet, nSet := false, false
	flag.Visit(func(f *flag.Flag) {
		sidesSet = sidesSet || f.Name == "sides"
		nSet = nSet || f.Name == "n"
	})
	if err := podCounts(&o, scale, nSet); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
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

// podCounts fills o's pod counts from -scale, or from -n without it.
func podCounts(o *options, scale string, nSet bool) error {
	if scale == "" {
		if err := checkPodCount(o.n); err != nil {
			return fmt.Errorf("-n: %w", err)
		}
		o.ns = []int{o.n}
		return nil
	}
	if nSet {
		return fmt.Errorf("-n and -scale: give one or the other")
	}
	ns, err := parsePodCounts(scale)
	if err != nil {
		return err
	}
	o.ns, o.scale = ns, true
	return nil
}

func run(ctx context.Context, o options) error {
	cfg := &harness.Config{Agent: harness.AgentNone, MaxPods: maxPodsFor(o.ns)}
	if o.pvc {
		// The driver runs as a pod: it is deployed by a node agent, and each side's agent
		// runs it again after the switch.
		cfg = &harness.Config{Agent: harness.AgentNodeagent, CSIHostpath: true, MaxPods: maxPodsFor(o.ns)}
	}
	// containerd counts the CRI calls each side makes (runtimecalls.go).
	addr, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	cfg.RuntimeMetricsAddr = addr
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

	stamp := time.Now().UTC().Format("20060102-150405")
	var runs []podsRun
	for _, n := range o.ns {
		po := o
		po.n = n
		if o.scale {
			fmt.Fprintf(os.Stdout, "\n## N = %d\n\n", n)
		}
		pr := podsRun{Pods: n, Results: measurePods(ctx, cfg, cs, po)}
		runs = append(runs, pr)
		reportPods(os.Stdout, cfg, o, stamp, pr)
		// After each pod count, so that a long run stopped half-way keeps what it measured.
		if err := writeJSON(cfg, o, stamp, runs); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if o.scale {
		reportScaling(os.Stdout, cfg, o, stamp, runs)
	}
	writeFleet(os.Stdout, fleetOf(runs))
	if o.strict {
		return failedRounds(runs, o.sides, o.rounds)
	}
	return nil
}

// failedRounds is an error naming each side of each pod count that has not every round
// measured, nil when all have.
func failedRounds(runs []podsRun, sides []string, rounds int) error {
	var errs []error
	for _, pr := range runs {
		for _, side := range sides {
			r := pr.Results[side]
			if len(r.Errors) > 0 || len(r.Rounds) != rounds {
				errs = append(errs, fmt.Errorf("%s at %d pods: %d of %d rounds measured, errors: %q", side, pr.Pods, len(r.Rounds), rounds, r.Errors))
			}
		}
	}
	if len(runs) == 0 {
		errs = append(errs, errors.New("no pod count measured"))
	}
	return errors.Join(errs...)
}

// measurePods runs every round of every side at o.n pods and returns their results. A
// failed round is recorded as such, and the next side starts from an empty node.
func measurePods(ctx context.Context, cfg *harness.Config, cs kubernetes.Interface, o options) map[string]sideResult {
	results := map[string]sideResult{}
	for round := range o.rounds {
		if ctx.Err() != nil {
			break
		}
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
				emptyNode(ctx, cfg, cs, o.pvc)
			}
			results[side] = r
		}
	}
	// The profiles in a round of their own: the profiler's buffers and signals would be
	// in nodeagent's figures only, the kubelet's taken without.
	if (o.profile > 0 || o.heap || o.profileRunning) && slices.Contains(o.sides, harness.AgentNodeagent) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "bench: profiling round: %s, %d pods (not counted)\n", harness.AgentNodeagent, o.n)
		po := o
		po.profiling = true
		var discard sideResult
		if err := measure(ctx, cfg, harness.AgentNodeagent, po, &discard); err != nil {
			fmt.Fprintf(os.Stderr, "bench: profiling round: %v\n", err)
			emptyNode(ctx, cfg, cs, o.pvc)
		}
	}
	return results
}

// emptyNode leaves an empty runtime and apiserver for the next side after a failed round.
func emptyNode(ctx context.Context, cfg *harness.Config, cs kubernetes.Interface, pvc bool) {
	_ = cs.CoreV1().Pods(benchNamespace).DeleteCollection(ctx, *metav1.NewDeleteOptions(0), metav1.ListOptions{})
	if pvc {
		_ = cs.CoreV1().PersistentVolumeClaims(benchNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}
	_ = cfg.SwitchAgent(ctx, harness.AgentNone)
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
		pids := cfg.Pids()
		res, err := floorRound(ctx, rt, cfg.RunDir, o.n, sampler(ctx, cfg, pids))
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
	pids := cfg.Pids()
	// The idle hold doubles as the new agent's settling time.
	cpu0, _ := runSeconds(pid)
	bySecond := cpuEvery(pid, time.Second)
	idle, err := auditedHold(ctx, cfg.AuditLog(), o.hold)
	idleBySecond := bySecond()
	if err != nil {
		return err
	}
	cpu1, _ := runSeconds(pid)
	rssIdle, _, _, _ := memory(pid)
	mark := markAudit(cfg.AuditLog())
	profiled := make(chan error, 1)
	if o.profiling && o.profile > 0 {
		go func() {
			profiled <- cpuProfile(ctx, cs, o.profile, filepath.Join(o.outDir, fmt.Sprintf("nodeagent-cpu-%dpods.pprof", o.n)))
		}()
	} else {
		profiled <- nil
	}
	w := workload{n: o.n, probe: o.probe, pvc: o.pvc, rootDir: cfg.AgentRootDir(), timelines: side == harness.AgentNodeagent,
		sample: sampler(ctx, cfg, pids)}
	// What the hold with the pods running measures, kept until the round has ended well.
	var held struct {
		rss, anon, cpu float64
		requests       heldRequests
		calls          map[string]float64
	}
	res, err := startupRound(ctx, cs, rt, w, func() error {
		held.rss, _, held.anon, _ = memory(pid)
		calls0 := runtimeCalls(ctx, cfg)
		c0, _ := runSeconds(pid)
		h0 := time.Now()
		var err error
		if held.requests, err = auditedHold(ctx, cfg.AuditLog(), o.hold); err != nil {
			return err
		}
		c1, _ := runSeconds(pid)
		held.cpu = c1 - c0
		held.calls = perMinute(callsBetween(calls0, runtimeCalls(ctx, cfg)), time.Since(h0))
		if o.profiling && o.heap {
			// After the hold's figures: the profile's GC and transfer are not in them.
			path := filepath.Join(o.outDir, fmt.Sprintf("nodeagent-heap-%dpods.pprof", o.n))
			if err := heapProfile(ctx, cs, path); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			}
		}
		if o.profiling && o.profileRunning {
			// One CPU profile at a time: the start's must have ended.
			perr := <-profiled
			profiled <- perr
			path := filepath.Join(o.outDir, fmt.Sprintf("nodeagent-cpu-running-%dpods.pprof", o.n))
			if err := cpuProfile(ctx, cs, o.hold, path); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			}
		}
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
	rssAfter, hwm, _, _ := memory(pid)
	r.Rounds = append(r.Rounds, res)
	r.RSSIdle = append(r.RSSIdle, rssIdle)
	r.CPUIdle = append(r.CPUIdle, cpu1-cpu0)
	r.CPUIdleBySecond = append(r.CPUIdleBySecond, idleBySecond)
	r.RequestsPerMinIdle = append(r.RequestsPerMinIdle, idle.perMinute)
	r.RSSPods = append(r.RSSPods, held.rss)
	r.AnonPods = append(r.AnonPods, held.anon)
	r.CPUPods = append(r.CPUPods, held.cpu)
	r.RequestsHeld = append(r.RequestsHeld, float64(held.requests.n))
	r.RequestsHeldBy = append(r.RequestsHeldBy, held.requests.by)
	r.RequestsPerMinPods = append(r.RequestsPerMinPods, held.requests.perMinute)
	if held.calls != nil {
		r.RuntimeCallsHeld = append(r.RuntimeCallsHeld, held.calls)
	}
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

// sampler reads the machine's CPU counters (sampleCPU) and the runtime's CRI calls.
func sampler(ctx context.Context, cfg *harness.Config, pids map[string]int) func() (cpuSample, error) {
	return func() (cpuSample, error) {
		s, err := sampleCPU(pids)
		s.calls = runtimeCalls(ctx, cfg)
		return s, err
	}
}

// runtimeCalls reads the cluster's containerd's CRI calls by method; nil, said on stderr,
// when it cannot.
func runtimeCalls(ctx context.Context, cfg *harness.Config) map[string]float64 {
	url := runtimeMetricsURL(cfg)
	if url == "" {
		return nil
	}
	calls, err := readRuntimeCalls(ctx, url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	}
	return calls
}

// runtimeMetricsURL is where the cluster's containerd serves its metrics, "" without.
func runtimeMetricsURL(cfg *harness.Config) string {
	if cfg.RuntimeMetricsAddr == "" {
		return ""
	}
	return "http://" + cfg.RuntimeMetricsAddr + "/v1/metrics"
}
