// Package eviction keeps the node alive when it runs short of memory,
// disk or PIDs, as the kubelet's eviction manager does: every
// housekeeping interval it measures the eviction signals (from the
// Summary API's numbers), sets the MemoryPressure, DiskPressure and
// PIDPressure conditions, and for the most urgent threshold met it first
// reclaims what the node holds for nothing (dead containers, unused
// images: disk signals only), then evicts one pod, in the kubelet's
// order, and waits for it to end before looking again.
//
// Before the thresholds, every pass evicts the pods that use more local
// storage than their own limits allow (localStorageCapacityIsolation):
// an emptyDir past its sizeLimit, a container or the pod past its
// ephemeral-storage limit.
//
// The conditions are published through a Pressure, which the node status
// and admission read; evictions go through Pods (the pod workers), which
// end the pod as Failed with reason Evicted and, for a threshold's
// eviction, the DisruptionTarget condition (TerminationByKubelet), as the
// kubelet's; a local storage limit's eviction has none, as there.
// kubelet_evictions counts the evictions by signal.
package eviction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/admission"
)

// Defaults applied by New, the kubelet's.
const (
	// DefaultInterval is how often the signals are measured (the kubelet's
	// evictionMonitoringPeriod).
	DefaultInterval = 10 * time.Second
	// DefaultPressureTransitionPeriod is evictionPressureTransitionPeriod's
	// default.
	DefaultPressureTransitionPeriod = 5 * time.Minute
)

const (
	// hardGracePeriod is how long a pod evicted for a hard threshold has
	// to stop: the kubelet's "immediate" eviction.
	hardGracePeriod = 1
	// cleanupTimeout and cleanupPoll: after an eviction, the next look
	// waits (this long at most) for the pod to have ended, so that its
	// resources show as freed.
	cleanupTimeout = 30 * time.Second
	cleanupPoll    = time.Second
)

// Event reason on the Node when a threshold is acted on, the kubelet's.
const reasonThresholdMet = "EvictionThresholdMet"

// Stats measures the node and its pods (*stats.Provider).
type Stats interface {
	Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error)
	// NodeSummary is a Summary without its pods.
	NodeSummary(ctx context.Context) (*statsapi.Summary, error)
}

// Pods are the pods the agent runs (*sync.Dispatcher).
type Pods interface {
	// ActivePods are the pods that hold node resources now (not ending,
	// not ended), with the resources allocated to them.
	ActivePods() []*v1.Pod
	// Evict ends a running pod: its containers stop within grace seconds
	// and its final status is Failed with reason and message, with
	// condition when not nil. It returns at once; an error says the pod
	// was not evicted (it is not running).
	Evict(uid types.UID, reason, message string, grace int64, condition *v1.PodCondition) error
	// PodEnded says whether the pod has stopped and freed what it held
	// (its volumes, its cgroup), or is gone.
	PodEnded(uid types.UID) bool
}

// ImageGC removes every unused image (*imagegc.Collector).
type ImageGC interface {
	DeleteUnusedImages(ctx context.Context) error
}

// ContainerGC removes every dead container, even of ended pods not
// deleted yet (*gc.Collector).
type ContainerGC interface {
	DeleteAllUnusedContainers(ctx context.Context) error
}

// Disks says which filesystems the runtime keeps apart from the root
// directory; asked until it answers.
type Disks interface {
	Layout(ctx context.Context) (DiskLayout, error)
}

// Metrics counts evictions (*metrics.Metrics).
type Metrics interface {
	// ObserveEviction counts a pod evicted for signal (a threshold's, or
	// one of the local storage limits' pseudo-signals).
	ObserveEviction(signal string)
	// ObserveEvictionStatsAge records how old the measurement of a
	// signal was when a pod was evicted on it.
	ObserveEvictionStatsAge(signal string, age time.Duration)
}

// Recorder records events (record.EventRecorder).
type Recorder interface {
	Eventf(object kruntime.Object, eventtype, reason, messageFmt string, args ...interface{})
	AnnotatedEventf(object kruntime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...interface{})
}

// Config configures a Manager.
type Config struct {
	// Thresholds are what the node keeps available (ParseThresholds).
	// With none, the node never reports pressure and nothing is evicted.
	Thresholds []Threshold
	// PressureTransitionPeriod is how long a condition stays after its
	// thresholds stop being met; zero is DefaultPressureTransitionPeriod.
	PressureTransitionPeriod time.Duration
	// MaxPodGracePeriodSeconds caps the grace period of pods evicted for
	// soft thresholds (evictionMaxPodGracePeriod); zero or less leaves
	// them none beyond the minimum.
	MaxPodGracePeriodSeconds int64
	// Interval is how often Run looks; zero is DefaultInterval.
	Interval time.Duration
	// LocalStorageCapacityIsolation evicts, on every pass, the pods over
	// their emptyDir sizeLimits and ephemeral-storage limits
	// (localStorageCapacityIsolation, on by the kubelet's default), with
	// or without thresholds.
	LocalStorageCapacityIsolation bool

	// Stats, Pods, Disks and Recorder are required; ImageGC and
	// ContainerGC are optional (nothing is reclaimed without them).
	Stats       Stats
	Pods        Pods
	ImageGC     ImageGC
	ContainerGC ContainerGC
	Disks       Disks
	Recorder    Recorder
	// Node is what the threshold events are recorded on. Required.
	Node *v1.ObjectReference
	// Pressure is where the conditions are published; nil makes one.
	Pressure *Pressure
	// Metrics counts the evictions; nil counts nothing.
	Metrics Metrics
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// Manager watches the eviction signals and evicts pods to relieve them.
type Manager struct {
	cfg Config

	// Owned by the goroutine that runs synchronize.
	mem memory
	// layout is known once Disks answered; thresholds then include the
	// containerfs ones, and rank and reclaim are set.
	layout     *DiskLayout
	thresholds []Threshold
	rank       map[Signal]ranker
	reclaim    map[Signal][]func(context.Context) error
}

// New validates cfg, fills its defaults and returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Stats == nil || cfg.Pods == nil || cfg.Disks == nil || cfg.Recorder == nil || cfg.Node == nil {
		return nil, errors.New("eviction: Stats, Pods, Disks, Recorder and Node are required")
	}
	for _, t := range cfg.Thresholds {
		if _, ok := signalResource[t.Signal]; !ok {
			return nil, fmt.Errorf("eviction: unsupported signal %q", t.Signal)
		}
	}
	if cfg.PressureTransitionPeriod <= 0 {
		cfg.PressureTransitionPeriod = DefaultPressureTransitionPeriod
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Pressure == nil {
		cfg.Pressure = &Pressure{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	return &Manager{cfg: cfg}, nil
}

// Pressure is where the manager publishes the node's conditions.
func (m *Manager) Pressure() *Pressure { return m.cfg.Pressure }

// Run looks every interval until ctx ends; after an eviction it waits for
// the pods to end and looks again at once.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("eviction")
	ctx = klog.NewContext(ctx, logger)
	for {
		evicted, err := m.synchronize(ctx)
		if err != nil && ctx.Err() == nil {
			logger.Error(err, "Eviction manager pass failed")
		}
		if len(evicted) > 0 {
			m.waitForEnd(ctx, evicted)
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.cfg.Clock.After(m.cfg.Interval):
		}
	}
}

// waitForEnd waits, a while at most, for the evicted pods to have stopped.
func (m *Manager) waitForEnd(ctx context.Context, pods []*v1.Pod) {
	logger := klog.FromContext(ctx)
	timeout := m.cfg.Clock.NewTimer(cleanupTimeout)
	defer timeout.Stop()
	tick := m.cfg.Clock.NewTicker(cleanupPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timeout.C():
			logger.Info("Timed out waiting for evicted pods to end", "pods", klog.KObjSlice(pods))
			return
		case <-tick.C():
			pods = slices.DeleteFunc(pods, func(p *v1.Pod) bool { return m.cfg.Pods.PodEnded(p.UID) })
			if len(pods) == 0 {
				logger.V(2).Info("Evicted pods ended")
				return
			}
		}
	}
}

// synchronize is one look: measure, decide, publish the conditions, evict
// the pods over their local storage limits, or else reclaim for the most
// urgent threshold met. It returns the pods it evicted.
func (m *Manager) synchronize(ctx context.Context) ([]*v1.Pod, error) {
	logger := klog.FromContext(ctx)
	if len(m.cfg.Thresholds) == 0 && !m.cfg.LocalStorageCapacityIsolation {
		return nil, nil
	}
	if m.layout == nil {
		layout, err := m.cfg.Disks.Layout(ctx)
		if err != nil {
			return nil, fmt.Errorf("find the image filesystem: %w", err)
		}
		m.setLayout(logger, layout)
	}

	pods := m.cfg.Pods.ActivePods()
	// The pods' own figures are read only when something will use them:
	// a pod whose local storage limits are checked, or a threshold met (to
	// rank the pods). Otherwise the node's alone: every 10 s, a Summary of
	// 250 pods is some 500 cgroup reads and the runtime's stats of each.
	withPods := m.cfg.LocalStorageCapacityIsolation && slices.ContainsFunc(pods, hasLocalStorageLimit)
	measure := m.cfg.Stats.NodeSummary
	if withPods {
		measure = func(ctx context.Context) (*statsapi.Summary, error) { return m.cfg.Stats.Summary(ctx, false) }
	}
	summary, err := measure(ctx)
	if err != nil {
		return nil, fmt.Errorf("measure the node: %w", err)
	}
	obs := observe(summary)
	now := m.cfg.Clock.Now()
	v := evaluate(m.mem, m.thresholds, obs, now, m.cfg.PressureTransitionPeriod)
	m.mem = v.next
	m.cfg.Pressure.set(v.next.conditions)
	if logger.V(4).Enabled() {
		for s, o := range obs {
			logger.V(4).Info("Eviction signal", "signal", s, "available", o.available, "capacity", o.capacity, "time", o.at)
		}
	}
	if len(v.next.conditions) > 0 {
		logger.V(3).Info("Node under pressure", "conditions", v.next.conditions)
	}
	usage := usageOf(summary.Pods)
	if withPods {
		var evicted []*v1.Pod
		for _, b := range overLimits(pods, usage, m.layout.DedicatedImageFs) {
			// As the kubelet: no DisruptionTarget for a pod over its own limit.
			if m.evict(ctx, b.pod, b.message, nil, hardGracePeriod, nil) {
				m.cfg.Metrics.ObserveEviction(b.signal)
				evicted = append(evicted, b.pod)
			}
		}
		if len(evicted) > 0 {
			return evicted, nil
		}
	}
	if len(v.act) == 0 {
		return nil, nil
	}

	t := v.act[0]
	res := signalResource[t.Signal]
	logger.Info("Attempting to reclaim", "resourceName", res, "threshold", t.String())
	m.cfg.Recorder.Eventf(m.cfg.Node, v1.EventTypeWarning, reasonThresholdMet, "Attempting to reclaim %s", res)
	if m.reclaimNodeLevel(ctx, t.Signal) {
		logger.Info("Reclaimed enough without evicting pods", "resourceName", res)
		return nil, nil
	}

	rank, ok := m.rank[t.Signal]
	if !ok {
		return nil, fmt.Errorf("no ranking for signal %s", t.Signal)
	}
	if len(pods) == 0 {
		logger.Error(nil, "Eviction thresholds are met, but no pod is running to evict", "resourceName", res)
		return nil, nil
	}
	if !withPods {
		// Measured after any reclaim above, the pods as they are now.
		summary, err := m.cfg.Stats.Summary(ctx, false)
		if err != nil {
			return nil, fmt.Errorf("measure the pods: %w", err)
		}
		usage = usageOf(summary.Pods)
	}
	pods = slices.Clone(pods)
	rank(pods, usage)
	logger.Info("Must evict a pod to reclaim", "resourceName", res, "pods", klog.KObjSlice(pods))
	for _, t := range v.act {
		if at := obs[t.Signal].at; !at.IsZero() {
			m.cfg.Metrics.ObserveEvictionStatsAge(string(t.Signal), m.cfg.Clock.Since(at))
		}
	}
	for _, pod := range pods {
		grace := int64(hardGracePeriod)
		if !t.Hard() {
			grace = m.cfg.MaxPodGracePeriodSeconds
			if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
				grace = min(grace, *g)
			}
		}
		msg, annotations := evictionMessage(res, pod, usage, v.act, obs)
		if m.evict(ctx, pod, msg, annotations, grace, disruptionTarget(pod, msg)) {
			m.cfg.Metrics.ObserveEviction(string(t.Signal))
			return []*v1.Pod{pod}, nil
		}
	}
	logger.Info("Unable to evict any pod from the node", "resourceName", res)
	return nil, nil
}

// disruptionTarget is the condition a pod evicted for a threshold ends
// with, the kubelet's.
func disruptionTarget(pod *v1.Pod, msg string) *v1.PodCondition {
	return &v1.PodCondition{
		Type:               v1.DisruptionTarget,
		ObservedGeneration: pod.Generation,
		Status:             v1.ConditionTrue,
		Reason:             v1.PodReasonTerminationByKubelet,
		Message:            msg,
	}
}

// evict ends the pod as Evicted with msg (and condition, when not nil),
// its containers stopped within grace seconds, and records the event; it
// says whether the pod goes. Critical pods are never evicted, as in the
// kubelet: a static pod would not be admitted again.
func (m *Manager) evict(ctx context.Context, pod *v1.Pod, msg string, annotations map[string]string, grace int64, condition *v1.PodCondition) bool {
	logger := klog.FromContext(ctx)
	if admission.IsCritical(pod) {
		logger.Info("Cannot evict a critical pod", "pod", klog.KObj(pod), "message", msg)
		return false
	}
	if err := m.cfg.Pods.Evict(pod.UID, Reason, msg, grace, condition); err != nil {
		logger.Info("Could not evict a pod", "pod", klog.KObj(pod), "err", err.Error())
		return false
	}
	m.cfg.Recorder.AnnotatedEventf(pod, annotations, v1.EventTypeWarning, Reason, "%s", msg)
	logger.Info("Evicting pod", "pod", klog.KObj(pod), "podUID", pod.UID, "gracePeriod", grace, "message", msg)
	return true
}

// setLayout fixes what depends on where the runtime keeps its data.
func (m *Manager) setLayout(logger klog.Logger, layout DiskLayout) {
	m.layout = &layout
	var dropped bool
	m.thresholds, dropped = withContainerFs(m.cfg.Thresholds, layout)
	if dropped {
		logger.Info("Ignoring containerfs eviction thresholds: they follow those of the filesystem holding the containers' writable layers")
	}
	m.rank = rankers(layout)
	m.reclaim = reclaimers(layout, m.cfg.ImageGC, m.cfg.ContainerGC)
	logger.V(2).Info("Eviction thresholds", "dedicatedImageFs", layout.DedicatedImageFs, "splitContainerFs", layout.SplitContainerFs, "thresholds", fmt.Sprint(m.thresholds))
}

// reclaimNodeLevel removes what the node holds for nothing on the
// signal's filesystem, measures again, and says whether that resolved
// every threshold (minimum reclaims included), so no pod need go.
func (m *Manager) reclaimNodeLevel(ctx context.Context, s Signal) bool {
	logger := klog.FromContext(ctx)
	funcs := m.reclaim[s]
	if len(funcs) == 0 {
		return false
	}
	for _, f := range funcs {
		if err := f(ctx); err != nil {
			logger.Info("Reclaiming node-level resources failed", "signal", s, "err", err.Error())
		}
	}
	summary, err := m.cfg.Stats.Summary(ctx, false)
	if err != nil {
		logger.Error(err, "Measuring the node after reclaiming failed")
		return false
	}
	obs := observe(summary)
	for _, t := range m.thresholds {
		if met(t, obs, true) {
			return false
		}
	}
	return true
}

// reclaimers are what frees each disk signal's filesystem without
// touching a pod, as in the kubelet: dead containers, then unused images,
// on whichever filesystems hold them.
func reclaimers(layout DiskLayout, images ImageGC, containers ContainerGC) map[Signal][]func(context.Context) error {
	var gcContainers, gcImages []func(context.Context) error
	if containers != nil {
		gcContainers = append(gcContainers, containers.DeleteAllUnusedContainers)
	}
	if images != nil {
		gcImages = append(gcImages, images.DeleteUnusedImages)
	}
	both := append(slices.Clone(gcContainers), gcImages...)
	r := map[Signal][]func(context.Context) error{}
	set := func(fs []func(context.Context) error, signals ...Signal) {
		for _, s := range signals {
			r[s] = fs
		}
	}
	switch {
	case layout.DedicatedImageFs && !layout.SplitContainerFs:
		// Logs and volumes on nodefs: nothing there is the node's to free.
		set(both, SignalImageFsAvailable, SignalImageFsInodesFree, SignalContainerFsAvailable, SignalContainerFsInodesFree)
	case layout.DedicatedImageFs:
		set(gcImages, SignalImageFsAvailable, SignalImageFsInodesFree)
		set(gcContainers, SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalContainerFsAvailable, SignalContainerFsInodesFree)
	default:
		set(both, SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalImageFsAvailable, SignalImageFsInodesFree,
			SignalContainerFsAvailable, SignalContainerFsInodesFree)
	}
	return r
}

// noMetrics counts nothing.
type noMetrics struct{}

func (noMetrics) ObserveEviction(string)                        {}
func (noMetrics) ObserveEvictionStatsAge(string, time.Duration) {}
