package gc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	gosync "sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// DefaultPeriod is how often garbage is collected: the kubelet's
// ContainerGCPeriod. The first collection comes one period after start.
const DefaultPeriod = time.Minute

// maxViewAge is how old the PLEG's view may be for a collection to act on
// it; an older one (a stuck relist) skips the collection.
const maxViewAge = time.Minute

// Runtime is what collection does to the container runtime (*runtime.Client).
type Runtime interface {
	// ContainerStatus tells where a container's log file is: the runtime
	// leaves it behind when it removes the container.
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	StopContainer(ctx context.Context, containerID string, timeout int64) error
	RemoveContainer(ctx context.Context, containerID string) error
	StopPodSandbox(ctx context.Context, podSandboxID string) error
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
}

var _ Runtime = (*runtime.Client)(nil)

// View is the observed runtime state (the PLEG's *pleg.Cache).
type View interface {
	// Pods returns every pod the runtime holds something of, each with
	// its sandboxes and containers newest first, and when the relist
	// that saw them started (zero before the first).
	Pods() ([]*runtime.PodStatus, time.Time)
}

// Config configures a Collector.
type Config struct {
	// Runtime is where containers and sandboxes are removed. Required.
	Runtime Runtime
	// View is the runtime's state, as the PLEG last saw it. Required.
	View View
	// Held returns the pods the agent holds, true for those whose worker
	// runs them (sync.Dispatcher.PodsHeld). Required.
	Held func() map[types.UID]bool
	// Listed reports whether every pod source has listed its pods; until
	// then no pod counts as gone. Required.
	Listed func() bool
	// PodLogsDir holds the pods' log directories (podLogsDir); empty: no
	// log directory is removed.
	PodLogsDir string
	// Period defaults to DefaultPeriod.
	Period time.Duration
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// Collector removes dead containers, empty sandboxes and the log
// directories of gone pods, every Period.
type Collector struct {
	cfg    Config
	policy Policy
	// known are the pods seen in the runtime or held since start, less
	// those of which nothing is left: the pods whose log directories are
	// this agent's. Owned by the goroutine that collects.
	known map[types.UID]bool
	// mu serializes collections: Run's and DeleteAllUnusedContainers'.
	mu gosync.Mutex
}

// New validates cfg and returns a Collector with the kubelet's policy.
func New(cfg Config) (*Collector, error) {
	if cfg.Runtime == nil || cfg.View == nil || cfg.Held == nil || cfg.Listed == nil {
		return nil, errors.New("gc: Runtime, View, Held and Listed are required")
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Collector{cfg: cfg, policy: DefaultPolicy, known: map[types.UID]bool{}}, nil
}

// Run collects every period until ctx ends.
func (c *Collector) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("gc")
	ctx = klog.NewContext(ctx, logger)
	t := c.cfg.Clock.NewTicker(c.cfg.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		if err := c.Collect(ctx); err != nil && ctx.Err() == nil {
			logger.Info("Container garbage collection incomplete, will retry", "err", err.Error())
		}
	}
}

// Collect decides what to remove and removes it. A removal that fails is
// retried at the next collection; what depends on it (the sandbox it is
// in, its pod's log directory) waits with it. Collections run one at a
// time.
func (c *Collector) Collect(ctx context.Context) error {
	return c.collect(ctx, false)
}

// DeleteAllUnusedContainers collects now and removes, beyond what a
// periodic collection does, every dead container and sandbox of the pods
// that ended but are not deleted: what the kubelet's eviction manager
// asks of container GC under disk pressure, before it evicts pods.
func (c *Collector) DeleteAllUnusedContainers(ctx context.Context) error {
	klog.FromContext(ctx).Info("Attempting to delete unused containers")
	return c.collect(ctx, true)
}

func (c *Collector) collect(ctx context.Context, stoppedToo bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The order of the reads matters: whatever the runtime or the disk
	// shows of a pod was made by a worker that is held from before, so a
	// pod not held after them has been let go by the Dispatcher.
	pods, at := c.cfg.View.Pods()
	if at.IsZero() {
		return errors.New("the runtime has not been listed yet")
	}
	if age := c.cfg.Clock.Since(at); age > maxViewAge {
		return fmt.Errorf("the runtime was last listed %s ago", age.Round(time.Second))
	}
	logDirs, err := c.logDirs()
	if err != nil {
		return err
	}
	listed := c.cfg.Listed()
	held := c.cfg.Held()
	c.remember(pods, held, logDirs)
	p := decide(input{
		pods: pods, held: held, listed: listed, logDirs: logDirs, known: c.known,
		now: c.cfg.Clock.Now(), policy: c.policy, stoppedToo: stoppedToo,
	})
	return c.carryOut(ctx, p)
}

// remember adds the pods in the runtime and those held to the known ones,
// and forgets those of which nothing is left: neither held, nor in the
// runtime, nor with a log directory. A pod logs directory may be shared
// by several agents (as the harness's nodes share the machine's): a log
// directory whose pod this agent never knew is another's.
func (c *Collector) remember(pods []*runtime.PodStatus, held map[types.UID]bool, logDirs []string) {
	seen := make(map[types.UID]bool, len(pods)+len(held)+len(logDirs))
	for _, p := range pods {
		seen[p.UID] = true
	}
	for uid := range held {
		seen[uid] = true
	}
	withLogs := map[types.UID]bool{}
	for _, name := range logDirs {
		if uid, ok := logDirUID(name); ok {
			withLogs[uid] = true
		}
	}
	for uid := range c.known {
		if !seen[uid] && !withLogs[uid] {
			delete(c.known, uid)
		}
	}
	for uid := range seen {
		c.known[uid] = true
	}
}

// logDirs lists the directories in the pod logs directory.
func (c *Collector) logDirs() ([]string, error) {
	if c.cfg.PodLogsDir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(c.cfg.PodLogsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pod logs directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// carryOut removes what p says, in its order, and returns what failed.
func (c *Collector) carryOut(ctx context.Context, p plan) error {
	logger := klog.FromContext(ctx)
	var errs []error
	// failedPods and failedSandboxes hold back what depends on a failed
	// removal: the sandbox a container is in, the log directory of a pod.
	failedPods, failedSandboxes := map[types.UID]bool{}, map[string]bool{}
	for _, r := range p.containers {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log := logger.WithValues("pod", klog.KRef(r.pod.Namespace, r.pod.Name), "podUID", r.pod.UID, "container", r.name, "containerID", r.id)
		if err := c.removeContainer(ctx, r); err != nil {
			failedPods[r.pod.UID], failedSandboxes[r.sandboxID] = true, true
			errs = append(errs, fmt.Errorf("remove container %s of pod %s: %w", r.id, r.pod.UID, err))
			continue
		}
		log.V(2).Info("Removed a dead container")
	}
	for _, r := range p.sandboxes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if failedSandboxes[r.id] {
			failedPods[r.pod.UID] = true
			continue
		}
		if err := c.removeSandbox(ctx, r.id); err != nil {
			failedPods[r.pod.UID] = true
			errs = append(errs, fmt.Errorf("remove sandbox %s of pod %s: %w", r.id, r.pod.UID, err))
			continue
		}
		logger.V(2).Info("Removed a pod sandbox", "pod", klog.KRef(r.pod.Namespace, r.pod.Name), "podUID", r.pod.UID, "sandboxID", r.id)
	}
	for _, r := range p.logDirs {
		if failedPods[r.uid] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(c.cfg.PodLogsDir, r.name)); err != nil {
			errs = append(errs, fmt.Errorf("remove pod log directory %s: %w", r.name, err))
			continue
		}
		logger.V(2).Info("Removed the log directory of a gone pod", "podUID", r.uid, "dir", r.name)
	}
	return errors.Join(errs...)
}

// removeContainer removes a dead container and its log files, as the
// kubelet does: the logs first, so that a failure leaves the container to
// be found again. One in an unknown state is stopped first.
func (c *Collector) removeContainer(ctx context.Context, r containerRemoval) error {
	rt := c.cfg.Runtime
	if r.unknown {
		if err := rt.StopContainer(ctx, r.id, 0); err != nil && !notFound(err) {
			return fmt.Errorf("stop container in unknown state: %w", err)
		}
	}
	resp, err := rt.ContainerStatus(ctx, r.id, false)
	if notFound(err) {
		return nil // removed already (by its pod's worker)
	}
	if err != nil {
		return err
	}
	if err := removeLogFiles(resp.GetStatus().GetLogPath()); err != nil {
		return err
	}
	if err := rt.RemoveContainer(ctx, r.id); err != nil && !notFound(err) {
		return err
	}
	return nil
}

// removeSandbox stops a sandbox that is not ready (the kubelet does, in
// case its network was left behind) and removes it.
func (c *Collector) removeSandbox(ctx context.Context, id string) error {
	if err := c.cfg.Runtime.StopPodSandbox(ctx, id); err != nil {
		if notFound(err) {
			return nil
		}
		return err
	}
	if err := c.cfg.Runtime.RemovePodSandbox(ctx, id); err != nil && !notFound(err) {
		return err
	}
	return nil
}

// removeLogFiles removes a container's log file and the rotated ones
// beside it (<log>.<timestamp>, gzipped or not). The runtime reports the
// path the agent gave it; a relative one is not looked for.
func removeLogFiles(path string) error {
	if path == "" || !filepath.IsAbs(path) {
		return nil
	}
	dir, base := filepath.Split(filepath.Clean(path))
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read container log directory: %w", err)
	}
	for _, e := range entries {
		if name := e.Name(); name != base && !strings.HasPrefix(name, base+".") {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove container log: %w", err)
		}
	}
	return nil
}

// notFound: the runtime does not know the object, which is what a
// removal wants.
func notFound(err error) bool {
	return err != nil && grpcstatus.Code(err) == codes.NotFound
}
