package sync

import (
	"context"
	"errors"
	gosync "sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/qos"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// DefaultResyncPeriod is how often a worker looks at its pod without
// being woken.
const DefaultResyncPeriod = 10 * time.Second

// orphanScanPeriod is how often the runtime is searched for pods the
// apiserver no longer has.
const orphanScanPeriod = 30 * time.Second

// Config configures the Dispatcher and every worker it starts.
type Config struct {
	Runtime  Runtime
	Images   Images
	Cache    PodCache
	Relister Relister
	Status   StatusWriter
	Recorder Recorder
	Secrets  SecretGetter
	// Admitter decides on every new pod before anything of it is made;
	// nil admits every pod.
	Admitter Admitter
	// Node is the node pods are admitted against; required with Admitter.
	Node NodeGetter
	// Cgroups makes a cgroup per pod (cgroupsPerQOS); nil puts every
	// sandbox under PodOptions.CgroupParent.
	Cgroups PodCgroups
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// PodOptions shape every sandbox (log dir, cgroup parent, DNS).
	PodOptions runtime.PodOptions
	// Resources are the node's settings for container resources: CFS
	// quota and period, memory capacity (for OOM scores), huge page sizes.
	Resources qos.NodeOptions
	// RuntimeHandler is passed to RunPodSandbox; empty is the default.
	RuntimeHandler string
	// RootDir holds the pod directories (<RootDir>/pods/<uid>).
	RootDir string
	// NodeIPs are reported as hostIP(s).
	NodeIPs []string
	// RuntimeName prefixes container IDs in statuses.
	RuntimeName string
	// ResyncPeriod defaults to DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// MaxRestartBackoff caps the crash-loop back-off
	// (crashLoopBackOff.maxContainerRestartPeriod); zero means 5 min.
	MaxRestartBackoff time.Duration
	// Known lists the pods the runtime holds anything of.
	Known func() []runtime.PodRef
	// SourceSynced reports whether the pod source has listed every pod
	// bound here, so that an unknown pod in the runtime is an orphan.
	SourceSynced func() bool
}

// Dispatcher hands pod updates to one Worker per pod UID and starts and
// reaps the workers.
type Dispatcher struct {
	cfg Config

	mu      gosync.Mutex
	ctx     context.Context // set by Run; nil before
	workers map[types.UID]*Worker
	wg      gosync.WaitGroup

	// admitMu makes admissions one at a time, each counting the pods
	// admitted before it.
	admitMu gosync.Mutex
	// listed says whether every pod bound here is known (admission waits).
	listed func() bool
}

// NewDispatcher validates cfg and builds a Dispatcher.
func NewDispatcher(cfg Config) (*Dispatcher, error) {
	if cfg.Runtime == nil || cfg.Images == nil || cfg.Cache == nil || cfg.Status == nil || cfg.Recorder == nil || cfg.Secrets == nil {
		return nil, errors.New("sync: Runtime, Images, Cache, Status, Recorder and Secrets are required")
	}
	if cfg.Admitter != nil && cfg.Node == nil {
		return nil, errors.New("sync: Node is required with Admitter")
	}
	if cfg.Relister == nil {
		cfg.Relister = noRelist{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	if cfg.Known == nil {
		cfg.Known = func() []runtime.PodRef { return nil }
	}
	// Admission waits for the source's first list, so that a new pod is
	// judged against every pod already running here; without a source to
	// wait for, it judges at once.
	listed := cfg.SourceSynced
	if listed == nil {
		listed = func() bool { return true }
	}
	if cfg.SourceSynced == nil {
		cfg.SourceSynced = func() bool { return false }
	}
	return &Dispatcher{cfg: cfg, workers: map[types.UID]*Worker{}, listed: listed}, nil
}

type noRelist struct{}

func (noRelist) RelistSoon() {}

// UpsertPod hands a pod's latest spec to its worker, starting one if
// needed. It never blocks.
func (d *Dispatcher) UpsertPod(pod *v1.Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.workers[pod.UID]; ok {
		w.update(pod, false)
		return
	}
	d.startLocked(newWorker(d, pod))
}

// RemovePod tells the pod's worker that the pod is gone from the source.
func (d *Dispatcher) RemovePod(pod *v1.Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.workers[pod.UID]; ok {
		w.update(nil, true)
		return
	}
	w := newWorker(d, pod)
	w.removed = true
	d.startLocked(w)
}

// Wake wakes the worker of a pod whose runtime state changed. A pod the
// source does not know, once the source has synced, is an orphan: a
// worker is started to remove it.
func (d *Dispatcher) Wake(ref runtime.PodRef) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.workers[ref.UID]; ok {
		w.poke()
		return
	}
	if !d.cfg.SourceSynced() || d.ctx == nil {
		return
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ref.Namespace, UID: ref.UID}}
	w := newWorker(d, pod)
	w.removed = true
	klog.FromContext(d.ctx).Info("Removing a pod the apiserver no longer has", "pod", klog.KObj(pod), "podUID", ref.UID)
	d.startLocked(w)
}

func (d *Dispatcher) startLocked(w *Worker) {
	d.workers[w.uid] = w
	if d.ctx != nil {
		d.launchLocked(w)
	}
}

func (d *Dispatcher) launchLocked(w *Worker) {
	d.wg.Add(1)
	w.poke()
	go func() {
		defer d.wg.Done()
		w.run(d.ctx)
		d.mu.Lock()
		if d.workers[w.uid] == w {
			delete(d.workers, w.uid)
		}
		d.mu.Unlock()
	}()
}

// Run starts the workers, looks for orphans now and then, and returns
// once ctx ends and every worker has stopped. Pods keep running.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	d.ctx = ctx
	for _, w := range d.workers {
		d.launchLocked(w)
	}
	d.mu.Unlock()
	t := d.cfg.Clock.NewTicker(time.Second)
	defer t.Stop()
	var lastScan time.Time
	for {
		select {
		case <-ctx.Done():
			d.wg.Wait()
			return nil
		case <-t.C():
		}
		if d.cfg.SourceSynced() && d.cfg.Clock.Since(lastScan) >= orphanScanPeriod {
			lastScan = d.cfg.Clock.Now()
			for _, ref := range d.cfg.Known() {
				d.Wake(ref)
			}
		}
	}
}
