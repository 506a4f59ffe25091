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

	"github.com/nodeagent/nodeagent/pkg/allocation"
	"github.com/nodeagent/nodeagent/pkg/qos"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// DefaultResyncPeriod is how often a worker looks at its pod without
// being woken.
const DefaultResyncPeriod = 10 * time.Second

// syncErrorRetry is how soon a pod whose sync failed in a way no event
// will mend (an invalid image name, an image it may never pull, a resize
// the runtime refused) is looked at again: the kubelet's backOffPeriod.
const syncErrorRetry = 10 * time.Second

// DefaultVolumeRefreshPeriod is the kubelet's default syncFrequency.
const DefaultVolumeRefreshPeriod = time.Minute

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
	Volumes  Volumes
	// Env reads the configMaps, secrets and services containers'
	// environments refer to; without it only plain values resolve.
	Env runtime.EnvSource
	// Allocatable is read for resourceFieldRef values of unset limits;
	// without it they read as zero.
	Allocatable func() v1.ResourceList
	// HostsFile is the node's hosts file, copied for host-network pods;
	// defaults to /etc/hosts.
	HostsFile string
	// Admitter decides on every new pod before anything of it is made;
	// nil admits every pod.
	Admitter Admitter
	// Node is the node pods are admitted against; required with Admitter.
	Node NodeGetter
	// Cgroups makes a cgroup per pod (cgroupsPerQOS); nil puts every
	// sandbox under PodOptions.CgroupParent.
	Cgroups PodCgroups
	// Probes runs liveness, readiness and startup probes; Hooks runs
	// postStart and preStop handlers. Both default to none.
	Probes Prober
	Hooks  HookRunner
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// PodOptions shape every sandbox (log dir, cgroup parent, DNS).
	PodOptions runtime.PodOptions
	// Resources are the node's settings for container resources: CFS
	// quota and period, memory capacity (for OOM scores), huge page sizes.
	Resources qos.NodeOptions
	// RuntimeHandler is passed to RunPodSandbox for pods that name no
	// RuntimeClass; empty is the runtime's default.
	RuntimeHandler string
	// RuntimeClasses resolves a pod's runtimeClassName to the handler its
	// sandbox runs under; nil knows of none, so that a pod naming one
	// fails to start.
	RuntimeClasses RuntimeClasses
	// UserNamespaces gives pods with hostUsers: false their user
	// namespaces; nil refuses such pods, as a runtime without support.
	UserNamespaces UserNamespaces
	// RootDir holds the pod directories (<RootDir>/pods/<uid>).
	RootDir string
	// NodeIPs are reported as hostIP(s).
	NodeIPs []string
	// RuntimeName prefixes container IDs in statuses.
	RuntimeName string
	// ResyncPeriod is how long a pod with nothing to do waits before its
	// worker looks at it again unwoken (the kubelet's syncFrequency);
	// defaults to DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// ResyncJitter adds up to this share of ResyncPeriod to each such wait,
	// at random, so that pods started together do not all look again
	// together (the kubelet: 0.5). Zero adds nothing.
	ResyncJitter float64
	// VolumeRefreshPeriod is how often a running pod's API-backed volume
	// contents (configMap, secret, downward API) are brought up to date
	// (syncFrequency); token refreshes come when due. Defaults to
	// DefaultVolumeRefreshPeriod.
	VolumeRefreshPeriod time.Duration
	// MaxParallelImagePulls is how many image pulls run at once across
	// all pods: 1 for serializeImagePulls, else maxParallelImagePulls;
	// zero means no limit.
	MaxParallelImagePulls int
	// MaxParallelSandboxes is how many RunPodSandbox calls run at once
	// across all pods; zero means the default, sandboxesPerCPU per CPU,
	// negative no limit.
	MaxParallelSandboxes int
	// MaxRestartBackoff caps the crash-loop back-off
	// (crashLoopBackOff.maxContainerRestartPeriod); zero means 5 min.
	MaxRestartBackoff time.Duration
	// CreateStartDelay holds every container this long between its
	// creation and its start: the end-to-end tests open the window in
	// which an agent killed leaves a container created. Zero in use.
	CreateStartDelay time.Duration
	// Known lists the pods the runtime or the disk holds anything of.
	Known func() []runtime.PodRef
	// KnownPod says whether the runtime or the disk holds anything of one
	// pod: asked of each pod new to this run, so it looks that pod up
	// rather than list them all. Nil: looked for in Known's list.
	KnownPod func(types.UID) bool
	// SourceSynced reports whether the pod source has listed every pod
	// bound here, so that an unknown pod in the runtime is an orphan.
	SourceSynced func() bool
	// Metrics records worker passes and pod start latency; nil records
	// nothing.
	Metrics Metrics
	// Timeline records every step of each pod's life; nil records
	// nothing.
	Timeline Timeline
	// Tracer makes spans of pods' starts and their steps (the kubelet's
	// tracing); nil makes none.
	Tracer Tracer
	// Allocations keeps the resources each pod was given (in-place
	// resize); nil keeps them in memory only.
	Allocations *allocation.Store
	// PullRecords decides whether a pod may use an image already present
	// without pulling it with its own credentials, and records the pulls
	// (imagePullCredentialsVerificationPolicy); nil lets every pod use
	// every present image, as with KubeletEnsureSecretPulledImages off.
	PullRecords PullRecords
}

// Dispatcher admits pods, hands pod updates to one Worker per pod UID,
// and starts and reaps the workers.
type Dispatcher struct {
	cfg      Config
	deps     *deps
	settings *settings

	mu      gosync.Mutex
	ctx     context.Context // set by Run; nil before
	workers map[types.UID]*Worker
	wg      gosync.WaitGroup

	// pending are the pods waiting for admission (their latest spec),
	// judged one at a time in the order they were created by the
	// admission loop, which admitWake wakes.
	pending   map[types.UID]*v1.Pod
	admitWake chan struct{}
	// preadmitted are the pending pods that need no judging: they only
	// wait for their name (a static pod's predecessor).
	preadmitted map[types.UID]bool
	// listed says whether every pod bound here is known (admission waits).
	listed func() bool
	// resizing are the pods whose spec asks for resources not allocated
	// yet; judging serializes the judgments of admissions and resizes,
	// which share the node's room.
	resizing map[types.UID]*v1.Pod
	judging  gosync.Mutex
	// resizeWake tells Run that a resize waits, to be judged every second.
	resizeWake chan struct{}
}

// NewDispatcher validates cfg and builds a Dispatcher.
func NewDispatcher(cfg Config) (*Dispatcher, error) {
	if cfg.Runtime == nil || cfg.Images == nil || cfg.Cache == nil || cfg.Status == nil || cfg.Recorder == nil || cfg.Secrets == nil || cfg.Volumes == nil {
		return nil, errors.New("sync: Runtime, Images, Cache, Status, Recorder, Secrets and Volumes are required")
	}
	if cfg.VolumeRefreshPeriod <= 0 {
		cfg.VolumeRefreshPeriod = DefaultVolumeRefreshPeriod
	}
	if cfg.Admitter != nil && cfg.Node == nil {
		return nil, errors.New("sync: Node is required with Admitter")
	}
	if cfg.Relister == nil {
		cfg.Relister = noRelist{}
	}
	if cfg.Probes == nil {
		cfg.Probes = noProbes{}
	}
	if cfg.Hooks == nil {
		cfg.Hooks = noProbes{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.RuntimeClasses == nil {
		cfg.RuntimeClasses = noRuntimeClasses{}
	}
	if cfg.Timeline == nil {
		cfg.Timeline = noTimeline{}
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noTracer{}
	}
	if cfg.PullRecords == nil {
		cfg.PullRecords = trustAll{}
	}
	if cfg.HostsFile == "" {
		cfg.HostsFile = runtime.EtcHostsPath
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	if cfg.Allocations == nil {
		cfg.Allocations, _ = allocation.Open("")
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
	d := &Dispatcher{
		cfg: cfg, workers: map[types.UID]*Worker{}, listed: listed,
		pending: map[types.UID]*v1.Pod{}, admitWake: make(chan struct{}, 1), resizeWake: make(chan struct{}, 1), preadmitted: map[types.UID]bool{},
		resizing: map[types.UID]*v1.Pod{},
		deps: &deps{
			runtime: cfg.Runtime, images: cfg.Images, cache: cfg.Cache, relister: cfg.Relister,
			status: cfg.Status, events: cfg.Recorder, secrets: cfg.Secrets, volumes: cfg.Volumes,
			env: cfg.Env, allocatable: cfg.Allocatable, cgroups: cfg.Cgroups, probes: cfg.Probes,
			hooks: cfg.Hooks, clock: cfg.Clock, metrics: cfg.Metrics, pulls: newSlots(cfg.MaxParallelImagePulls),
			sandboxes:      newSlots(maxParallelSandboxes(cfg.MaxParallelSandboxes)),
			pullRecords:    cfg.PullRecords,
			runtimeClasses: cfg.RuntimeClasses, userns: cfg.UserNamespaces, alloc: cfg.Allocations, resizes: newResizeConditions(),
			timeline: cfg.Timeline, tracer: cfg.Tracer,
		},
		settings: &settings{
			podOptions: cfg.PodOptions, resources: cfg.Resources, runtimeHandler: cfg.RuntimeHandler,
			rootDir: cfg.RootDir, nodeIPs: cfg.NodeIPs, runtimeName: cfg.RuntimeName, hostsFile: cfg.HostsFile,
			resync: cfg.ResyncPeriod, resyncJitter: cfg.ResyncJitter, volumeRefresh: cfg.VolumeRefreshPeriod, maxRestartBackoff: cfg.MaxRestartBackoff,
			createStartDelay: cfg.CreateStartDelay,
		},
	}
	return d, nil
}

type noRelist struct{}

func (noRelist) RelistPod(types.UID) {}

// newWorker builds the worker of one pod.
func (d *Dispatcher) newWorker(pod *v1.Pod) *Worker {
	return newWorker(d.deps, d.settings, pod)
}

// UpsertPod hands a pod's latest spec to its worker, or to admission when
// it has none yet. A resize the spec asks for is judged first, so that
// the worker wakes to the new allocation. It never blocks for long.
func (d *Dispatcher) UpsertPod(pod *v1.Pod) {
	d.mu.Lock()
	w, ok := d.workers[pod.UID]
	_, pending := d.pending[pod.UID]
	d.mu.Unlock()
	if !ok {
		// Whether the runtime or the disk holds anything of a pod new to
		// this run decides whether it was admitted before; it is read
		// outside the lock (a directory read) and only when it matters.
		known := !pending && (d.cfg.Admitter != nil || pod.DeletionTimestamp != nil) && d.known(pod.UID)
		d.mu.Lock()
		w, ok = d.workers[pod.UID]
		if !ok {
			d.queueLocked(pod, known)
			_, started := d.workers[pod.UID]
			d.mu.Unlock()
			if started {
				// A pod that ran before this run of the agent: a resize
				// asked while the agent was away is judged now.
				d.queueResize(pod)
			}
			return
		}
		d.mu.Unlock()
	}
	d.queueResize(pod)
	w.update(pod, false)
}

// RemovePod tells the pod's worker that the pod is gone from the source.
// A pod never admitted has nothing to remove; one the agent knows nothing
// of gets a worker that removes whatever the runtime holds of it.
func (d *Dispatcher) RemovePod(pod *v1.Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.workers[pod.UID]; ok {
		w.update(nil, true)
		return
	}
	if _, ok := d.pending[pod.UID]; ok {
		delete(d.pending, pod.UID)
		delete(d.preadmitted, pod.UID)
		return
	}
	w := d.newWorker(pod)
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
	if _, ok := d.pending[ref.UID]; ok || !d.cfg.SourceSynced() || d.ctx == nil {
		return
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ref.Namespace, UID: ref.UID}}
	w := d.newWorker(pod)
	w.removed = true
	klog.FromContext(d.ctx).Info("Removing a pod the apiserver no longer has", "pod", klog.KObj(pod), "podUID", ref.UID)
	d.startLocked(w)
}

// WakePod wakes the worker of a pod, if it has one: a probe's verdict on
// one of its containers changed.
func (d *Dispatcher) WakePod(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.workers[uid]; ok {
		w.poke()
	}
}

func (d *Dispatcher) startLocked(w *Worker) {
	d.workers[w.uid] = w
	// A pod that runs holds what its spec asks for, unless it holds an
	// allocation already (from an earlier run of the agent).
	if pod := w.pod; pod != nil && !w.removed && !w.ended.Load() {
		if _, ok := d.deps.alloc.Allocated(w.uid); !ok {
			if err := d.deps.alloc.SetAllocated(pod); err != nil && d.ctx != nil {
				klog.FromContext(d.ctx).Error(err, "Recording a pod's allocation failed", "pod", klog.KObj(pod))
			}
		}
	}
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
		// A static pod may have waited for this one's name.
		d.wakeAdmission()
	}()
}

// tickWait is how long Run waits before it looks again: a second while a
// resize waits for room or the pods bound here are not all known yet,
// else until the next look for orphans. An idle agent so wakes twice a
// minute here, not every second.
func (d *Dispatcher) tickWait(lastScan time.Time) time.Duration {
	d.mu.Lock()
	resizing := len(d.resizing) > 0
	d.mu.Unlock()
	if resizing || !d.cfg.SourceSynced() {
		return time.Second
	}
	return max(time.Second, orphanScanPeriod-d.cfg.Clock.Since(lastScan))
}

// Run starts the workers and the admission of new pods, looks for
// orphans now and then, and returns once ctx ends and every worker has
// stopped. Pods keep running.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	d.ctx = ctx
	for _, w := range d.workers {
		d.launchLocked(w)
	}
	d.mu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.admitLoop(ctx)
	}()
	var lastScan time.Time
	for {
		t := d.cfg.Clock.NewTimer(d.tickWait(lastScan))
		select {
		case <-ctx.Done():
			t.Stop()
			d.wg.Wait()
			return nil
		case <-d.resizeWake:
			t.Stop()
			continue
		case <-t.C():
		}
		if d.cfg.SourceSynced() && d.cfg.Clock.Since(lastScan) >= orphanScanPeriod {
			lastScan = d.cfg.Clock.Now()
			known := d.cfg.Known()
			for _, ref := range known {
				d.Wake(ref)
			}
			d.forgetAllocations(ctx, known)
		}
		// Deferred resizes are judged again every second: room frees up
		// as pods end, and judging is cheap (no I/O).
		d.judgeResizes(ctx)
	}
}

// Pods returns the pods the agent runs: the latest desired spec of every
// pod with a worker that the source still has. The pods are shared and
// must not be modified.
func (d *Dispatcher) Pods() []*v1.Pod {
	d.mu.Lock()
	workers := make([]*Worker, 0, len(d.workers))
	for _, w := range d.workers {
		workers = append(workers, w)
	}
	d.mu.Unlock()
	pods := make([]*v1.Pod, 0, len(workers))
	for _, w := range workers {
		if pod, removed := w.latest(); pod != nil && !removed {
			pods = append(pods, pod)
		}
	}
	return pods
}

// PodsHeld returns every pod the Dispatcher holds: those with a worker,
// whatever it is doing, and those waiting for admission. The value says
// whether the pod runs: its worker syncs it (it may start containers)
// and nothing says it ends (no deletion, not removed, no terminal phase,
// its worker not stopping or stopped). A pod missing here has no worker:
// it left the source and its worker cleaned it up, or it was never
// known; once the source has listed, whatever the runtime or the disk
// keeps of it is garbage.
func (d *Dispatcher) PodsHeld() map[types.UID]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]bool, len(d.workers)+len(d.pending))
	for uid := range d.pending {
		out[uid] = false
	}
	for uid, w := range d.workers {
		pod, removed := w.latest()
		out[uid] = !w.ended.Load() && !removed && pod != nil && pod.DeletionTimestamp == nil && !isTerminal(pod.Status.Phase)
	}
	return out
}
