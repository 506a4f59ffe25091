package sync

import (
	"context"
	"math/rand/v2"
	"slices"
	gosync "sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// Worker owns one pod: its goroutine is the only one that acts on it. It
// asks decide for the next step, carries it out through its deps, and
// hands the outcome to advance; it decides nothing itself.
type Worker struct {
	uid      types.UID
	deps     *deps
	settings *settings

	mu      gosync.Mutex
	pod     *v1.Pod // latest desired pod
	removed bool    // the pod left the source (deleted from the apiserver)
	// updated: the spec changed since the last pass began.
	updated bool
	// cancelPass abandons the sync pass in flight (a pull, a hook) when
	// the pod is deleted; nil when none runs.
	cancelPass context.CancelFunc

	wake chan struct{} // capacity 1: a pending wake-up

	// Owned by the worker goroutine.
	state     podState
	lastActed time.Time
	volumes   podVolumes
	// imageVolumesShown is the failure each image volume last showed: the
	// ImagePullBackOff message repeats the ErrImagePull one.
	imageVolumesShown map[string]status.Waiting
	// passes counts the worker's passes; start follows the pod's start.
	passes int
	// failedWait is the wait after the last step, when it failed; zero
	// after one that did not. It doubles with each failure in a row.
	failedWait time.Duration
	start      startTracker

	// ended: the pod no longer holds node resources (it is ending or
	// ended). Read by the Dispatcher's admission.
	ended atomic.Bool
	// evicted is set once by the eviction manager (Dispatcher.Evict).
	evicted atomic.Pointer[eviction]
}

func newWorker(d *deps, s *settings, pod *v1.Pod) *Worker {
	return &Worker{
		uid: pod.UID, deps: d, settings: s, pod: pod, wake: make(chan struct{}, 1),
		start: newStartTracker(pod, d.clock.Now()),
	}
}

// update hands the worker the latest pod; it never blocks. A change of
// the status alone (usually the agent's own write coming back) is kept
// for the next pass but does not wake the worker: only the spec, the
// deletion or the runtime's state call for action. A deletion abandons
// the pass in flight, so that the pod goes straight to its termination.
func (w *Worker) update(pod *v1.Pod, removed bool) {
	w.mu.Lock()
	specChanged := pod != nil && !onlyStatusChanged(w.pod, pod)
	wake := removed || pod == nil || specChanged || gatesChanged(w.pod, pod)
	deleted := removed || (pod != nil && pod.DeletionTimestamp != nil && w.pod.DeletionTimestamp == nil)
	w.updated = w.updated || specChanged
	if pod != nil {
		w.pod = pod
	}
	w.removed = w.removed || removed
	if deleted && w.cancelPass != nil {
		w.cancelPass()
	}
	w.mu.Unlock()
	if wake {
		w.poke()
	}
}

// onlyStatusChanged says whether b differs from a in nothing the worker
// acts on.
func onlyStatusChanged(a, b *v1.Pod) bool {
	if a == nil || b == nil {
		return false
	}
	if a.UID != b.UID || a.Generation != b.Generation ||
		!equality.Semantic.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp) ||
		!equality.Semantic.DeepEqual(a.DeletionGracePeriodSeconds, b.DeletionGracePeriodSeconds) {
		return false
	}
	// The apiserver counts every change of a pod's spec in its generation
	// (since v1.33, KEP-5067: updates, /resize and /ephemeralcontainers
	// alike), so two versions of one pod from it with one generation have
	// one spec: the most frequent update, a status write coming back, is
	// told apart without comparing the specs field by field. Pods without
	// a generation (from files, or from an older apiserver) are compared.
	if a.Generation > 0 && a.ResourceVersion != "" && b.ResourceVersion != "" {
		return true
	}
	return equality.Semantic.DeepEqual(a.Spec, b.Spec)
}

func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) latest() (*v1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.removed
}

// operation names the pass about to run for the metrics, and takes the
// note of a spec change.
func (w *Worker) operation(pod *v1.Pod, removed bool) string {
	w.mu.Lock()
	updated := w.updated
	w.updated = false
	w.mu.Unlock()
	w.passes++
	switch {
	case removed || pod.DeletionTimestamp != nil:
		return opKill
	case w.passes == 1:
		return opCreate
	case updated:
		return opUpdate
	}
	return opSync
}

// run is the worker goroutine. It returns once the pod is removed and
// cleaned up, or when ctx ends.
func (w *Worker) run(ctx context.Context) {
	pod, _ := w.latest()
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", w.uid)
	ctx = klog.NewContext(ctx, logger)
	timer := w.deps.clock.NewTimer(w.settings.resync)
	defer timer.Stop()
	defer func() { w.deps.tracer.Forget(w.uid, w.deps.clock.Now()) }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C():
		}
		pod, removed := w.latest()
		if pod != nil {
			// The pod as allocated: a resize not allocated yet waits.
			pod, _ = w.deps.alloc.Apply(pod)
		}
		observed, err := w.deps.cache.GetNewerThan(ctx, w.uid, w.lastActed)
		if err != nil {
			return
		}
		op, began := w.operation(pod, removed), w.deps.clock.Now()
		next, done := w.passOnItsOwnStack(ctx, pod, removed, observed)
		w.deps.metrics.ObservePodWorker(op, w.deps.clock.Since(began))
		if done {
			return
		}
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		timer.Reset(next)
	}
}

// resyncWait is how long the pod waits for its next pass when nothing
// asks for an earlier one: the resync period, with its jitter.
func (w *Worker) resyncWait() time.Duration {
	d := w.settings.resync
	if j := w.settings.resyncJitter; j > 0 {
		d += time.Duration(rand.Float64() * j * float64(d))
	}
	return d
}

// passOnItsOwnStack runs the pass on a goroutine of its own and waits for
// it. A pass goes deep (gRPC, protobuf, the status patch's JSON) and grows
// its goroutine's stack, to some 28 KB on average; the worker then waits
// for its next pass, most often a minute, on that stack, which Go halves
// only at a GC, and a settled node collects rarely: a node of 50 pods held
// 1.1 MB of such stacks (the agent's MemStats), one of 250 would hold 7.
// A goroutine that ends gives its stack back; the worker's stays small.
func (w *Worker) passOnItsOwnStack(ctx context.Context, pod *v1.Pod, removed bool, observed *runtime.PodStatus) (next time.Duration, done bool) {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		next, done = w.pass(ctx, pod, removed, observed)
	}()
	<-ended
	return next, done
}

// pass takes one step: it asks decide what to do, does it, and advances
// the pod's state with the outcome. It says when to look again, or that
// the worker is finished.
func (w *Worker) pass(ctx context.Context, pod *v1.Pod, removed bool, observed *runtime.PodStatus) (time.Duration, bool) {
	now := w.deps.clock.Now()
	// Containers whose start died with an earlier agent are not the pod's:
	// neither its plan nor its status sees them, and they are removed.
	observed, abandoned := withoutAbandonedStarts(observed)
	s := decide(&w.state, input{
		pod: pod, removed: removed, observed: observed, abandoned: abandoned, probes: w.probeResults(observed), now: now, evict: w.evicted.Load(),
		actuated: w.deps.alloc.ActuatedPod(w.uid),
		resync:   w.resyncWait(), maxRestartBackoff: w.settings.maxRestartBackoff,
	})
	// The pod's start, while it lasts, is the parent of the pass's steps;
	// a step that ends the pod ends its start and runs under its
	// termination, until a pass finds nothing left to do.
	ctx = w.deps.tracer.Pass(ctx, timelinePod(pod), tracedPass(&w.state, s, pod, removed), now)
	o := w.execute(ctx, s, pod, observed)
	w.state = advance(w.state, s, o, now)
	if w.state.phase != phaseSyncing {
		w.ended.Store(true)
	}
	if s.kind == stepSync {
		w.resizeProgress(pod, s, o)
		if o.observed != nil {
			observed = o.observed
		}
		w.report(pod, observed)
	}
	if o.err == nil {
		w.failedWait = 0
	}
	switch {
	case s.kind == stepDone:
		klog.FromContext(ctx).V(2).Info("Pod removed")
		w.deps.timeline.Forget(w.uid, now)
		w.deps.resizes.forget(w.uid)
		if err := w.deps.alloc.Remove(w.uid); err != nil {
			klog.FromContext(ctx).Error(err, "Forgetting the pod's allocation failed")
		}
		if pod != nil && isStatic(pod) {
			// Its status would wait for a mirror pod that never comes.
			w.deps.status.Forget(w.uid)
		}
		return 0, true
	case o.err != nil:
		w.failedWait = min(max(2*w.failedWait, failedStepFirstWait), failedStepMaxWait)
		klog.FromContext(ctx).Error(o.err, "Pod step failed, will retry", "step", s.kind.String(), "retryIn", w.failedWait)
		return w.failedWait, false
	case s.kind == stepSync:
		return min(s.wait, max(o.next, 0)), false
	case s.kind == stepIdle:
		return s.wait, false
	}
	// An ending step done: the next one follows at once (after a relist,
	// when this one changed the runtime).
	w.poke()
	return w.settings.resync, false
}

// Retries of a failed step: the first a second later, each next one twice
// as late, at most failedStepMaxWait (the kubelet's pod workers wait 10 s
// after any failed sync). A runtime too loaded to finish a call is not
// asked again every second by every pod: deleting 250 pods on a saturated
// two-core machine, containerd failed to handle containers' exits in time,
// and the cleanups retried each second made four to eight times the
// removals the pods needed. The runtime's events still wake the worker.
const (
	failedStepFirstWait = time.Second
	failedStepMaxWait   = 10 * time.Second
)

// execute carries step s out.
func (w *Worker) execute(ctx context.Context, s step, pod *v1.Pod, observed *runtime.PodStatus) outcome {
	switch s.kind {
	case stepSync:
		return w.syncPod(ctx, pod, observed, s)
	case stepStop:
		if e := s.begin; e != nil && e.event {
			w.deps.events.Eventf(pod, v1.EventTypeWarning, e.reason, "%s", e.message)
		}
		w.deps.probes.RemovePod(w.uid)
		return outcome{err: w.killPod(ctx, pod, observed, s.grace)}
	case stepFinal:
		return outcome{final: w.finalize(ctx, pod, observed, s.write)}
	case stepCleanup:
		return outcome{err: w.cleanup(ctx, pod, observed)}
	case stepRelease:
		return outcome{err: w.release(ctx, pod)}
	case stepConfirm:
		return outcome{err: w.confirmDeletion(ctx, pod)}
	}
	return outcome{}
}

// passContext is the context of a sync pass: it ends when the pod is
// deleted, so that nothing of a pass in flight holds up the termination.
func (w *Worker) passContext(ctx context.Context) (context.Context, func()) {
	pctx, cancel := context.WithCancel(ctx)
	w.mu.Lock()
	if w.removed || w.pod.DeletionTimestamp != nil {
		cancel()
	}
	w.cancelPass = cancel
	w.mu.Unlock()
	return pctx, func() {
		w.mu.Lock()
		w.cancelPass = nil
		w.mu.Unlock()
		cancel()
	}
}

// report hands the status of a running pod to the status manager, and
// the pod's containers to the prober.
func (w *Worker) report(pod *v1.Pod, observed *runtime.PodStatus) {
	w.deps.probes.UpdatePod(pod, observed)
	w.publish(pod, w.computeStatus(pod, observed, false))
}

// publish hands the status of a running pod to the status manager, and
// to the start metrics, the timeline and the tracer.
func (w *Worker) publish(pod *v1.Pod, st v1.PodStatus) {
	now, tp := w.deps.clock.Now(), timelinePod(pod)
	w.start.observe(w.deps.metrics, pod, st, now)
	w.deps.timeline.ObserveStatus(tp, &st, now)
	w.deps.tracer.ObserveStatus(tp, &st, now)
	w.deps.status.Set(pod, st)
}

// finalStatus is the status of the ended pod: computed from what the
// runtime shows, or as its ending says.
func (w *Worker) finalStatus(pod *v1.Pod, observed *runtime.PodStatus) v1.PodStatus {
	return endStatus(w.state.end, pod, metav1.NewTime(w.deps.clock.Now()), func() v1.PodStatus { return w.computeStatus(pod, observed, true) })
}

// endStatus is the final status a pod's ending calls for: the bare
// refusal of a rejected pod, else the computed one, Failed with the
// ending's reason when it has one, and with the ending's condition
// (transitioned at now) in place of any of its type.
func endStatus(e ending, pod *v1.Pod, now metav1.Time, compute func() v1.PodStatus) v1.PodStatus {
	if e.rejected {
		return rejectedStatus(pod, e.reason, e.message)
	}
	st := compute()
	if e.reason != "" {
		st.Phase, st.Reason, st.Message = v1.PodFailed, e.reason, e.message
	}
	if e.condition != nil {
		c := *e.condition
		c.LastTransitionTime = now
		st.Conditions = slices.DeleteFunc(st.Conditions, func(o v1.PodCondition) bool { return o.Type == c.Type })
		st.Conditions = append(st.Conditions, c)
	}
	return st
}

// acted notes that the runtime was changed, so that the next pass waits
// for a relist that shows it.
func (w *Worker) acted() {
	w.lastActed = w.deps.clock.Now()
	w.deps.relister.RelistPod(w.uid)
	w.poke()
}

func (w *Worker) computeStatus(pod *v1.Pod, observed *runtime.PodStatus, terminal bool) v1.PodStatus {
	return w.statusFrom(pod, observed, w.state.waiting, terminal)
}

// statusFrom computes the pod's status with the containers' waiting
// reasons given (computeStatus: the worker's own).
func (w *Worker) statusFrom(pod *v1.Pod, observed *runtime.PodStatus, waiting map[string]status.Waiting, terminal bool) v1.PodStatus {
	return status.Compute(status.Input{
		Pod: pod, Observed: observed, Waiting: waiting, Terminal: terminal,
		NodeIPs: w.settings.nodeIPs, RuntimeName: w.settings.runtimeName, Now: w.deps.clock.Now(),
		Probes: w.statusProbes,
		Actuated: func(name string) (v1.ResourceRequirements, bool) {
			return w.deps.alloc.Actuated(w.uid, name)
		},
		ResizeConditions: resizeConditionsUnless(terminal, w.deps.resizes.list(w.uid)),
	})
}

// resizeConditionsUnless drops the resize conditions from an ended pod's
// status: nothing of it is resized any more.
func resizeConditionsUnless(terminal bool, conds []v1.PodCondition) []v1.PodCondition {
	if terminal {
		return nil
	}
	return conds
}
