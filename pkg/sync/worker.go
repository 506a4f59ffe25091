package sync

import (
	"context"
	gosync "sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// workerState is where a pod is in its life on this node.
type workerState int

const (
	// syncing: the pod should run; containers are started as needed.
	syncing workerState = iota
	// terminated: the pod's containers and sandbox are stopped; only its
	// removal (deletion) is left.
	terminated
	// cleaned: everything of the pod is gone from the runtime and disk.
	cleaned
)

// Worker owns one pod: its goroutine is the only one that acts on it.
type Worker struct {
	d   *Dispatcher
	uid types.UID

	mu      gosync.Mutex
	pod     *v1.Pod // latest desired pod
	removed bool    // the pod left the source (deleted from the apiserver)
	// updated: the spec changed since the last pass began.
	updated bool

	wake chan struct{} // capacity 1: a pending wake-up

	// Owned by the worker goroutine.
	state     workerState
	lastActed time.Time
	changed   bool // this pass changed the runtime
	waiting   map[string]status.Waiting
	restarts  *backoff
	pulls     *backoff
	volumes   podVolumes
	// imageVolumes: the pod's image volumes as this pass pulled them.
	imageVolumes imageVolumePulls
	// podIPs are the addresses of the pod's current sandbox, known once
	// the sandbox exists (the node's for a host-network pod).
	podIPs []string
	// cgroupRemoved: the pod's cgroup is gone for good (the pod ended).
	cgroupRemoved bool
	// passes counts the worker's passes; start follows the pod's start.
	passes int
	start  startTracker

	// holds: the pod was admitted and counts against the node's
	// resources; ended: it no longer does (it finished or was rejected).
	// Read by other workers' admissions.
	holds, ended atomic.Bool
}

func newWorker(d *Dispatcher, pod *v1.Pod) *Worker {
	return &Worker{
		d: d, uid: pod.UID, pod: pod, wake: make(chan struct{}, 1),
		waiting:  map[string]status.Waiting{},
		restarts: newBackoff(d.cfg.Clock, d.cfg.MaxRestartBackoff),
		pulls:    newBackoff(d.cfg.Clock, 0),
		start:    newStartTracker(pod, d.cfg.Clock.Now()),
	}
}

// update hands the worker the latest pod; it never blocks. A change of
// the status alone (usually the agent's own write coming back) is kept
// for the next pass but does not wake the worker: only the spec, the
// deletion or the runtime's state call for action.
func (w *Worker) update(pod *v1.Pod, removed bool) {
	w.mu.Lock()
	specChanged := pod != nil && !onlyStatusChanged(w.pod, pod)
	wake := removed || pod == nil || specChanged || gatesChanged(w.pod, pod)
	w.updated = w.updated || specChanged
	if pod != nil {
		w.pod = pod
	}
	w.removed = w.removed || removed
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
	return a.UID == b.UID && a.Generation == b.Generation &&
		equality.Semantic.DeepEqual(a.Spec, b.Spec) &&
		equality.Semantic.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp) &&
		equality.Semantic.DeepEqual(a.DeletionGracePeriodSeconds, b.DeletionGracePeriodSeconds)
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
	timer := w.d.cfg.Clock.NewTimer(w.d.cfg.ResyncPeriod)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C():
		}
		pod, removed := w.latest()
		observed, err := w.d.cfg.Cache.GetNewerThan(ctx, w.uid, w.lastActed)
		if err != nil {
			return
		}
		op, began := w.operation(pod, removed), w.d.cfg.Clock.Now()
		next, done := w.syncOnce(ctx, pod, removed, observed)
		w.d.cfg.Metrics.ObservePodWorker(op, w.d.cfg.Clock.Since(began))
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

// syncOnce does one pass for the pod and says when to look again, or
// that the worker is finished.
func (w *Worker) syncOnce(ctx context.Context, pod *v1.Pod, removed bool, observed *runtime.PodStatus) (time.Duration, bool) {
	logger := klog.FromContext(ctx)
	resync := w.d.cfg.ResyncPeriod
	switch {
	case removed:
		// Gone from the apiserver: stop and remove everything; there is no
		// object left to report to.
		if err := w.terminate(ctx, pod, observed); err != nil {
			logger.Error(err, "Stopping removed pod failed, will retry")
			return time.Second, false
		}
		if err := w.cleanup(ctx, pod, observed); err != nil {
			logger.Error(err, "Cleaning up removed pod failed, will retry")
			return time.Second, false
		}
		w.setState(cleaned)
		logger.V(2).Info("Pod removed")
		return 0, true
	case pod.DeletionTimestamp != nil:
		if w.state == cleaned {
			return resync, false
		}
		if err := w.terminate(ctx, pod, observed); err != nil {
			logger.Error(err, "Stopping deleted pod failed, will retry")
			return time.Second, false
		}
		final, err := w.d.cfg.Cache.GetNewerThan(ctx, w.uid, w.d.cfg.Clock.Now())
		if err != nil {
			return 0, true
		}
		st := w.computeStatus(pod, final, true)
		if err := w.cleanup(ctx, pod, final); err != nil {
			logger.Error(err, "Cleaning up deleted pod failed, will retry")
			return time.Second, false
		}
		w.setState(cleaned)
		w.d.cfg.Status.SetFinal(pod, st)
		return resync, false
	case w.state != syncing || isTerminal(pod.Status.Phase):
		// Ended: nothing runs again; keep the final status current.
		if w.state == syncing {
			if err := w.terminate(ctx, pod, observed); err != nil {
				logger.Error(err, "Stopping finished pod failed, will retry")
				return time.Second, false
			}
			w.setState(terminated)
		}
		// Nothing of an ended pod runs again: its cgroup goes, and it no
		// longer counts in its QoS class.
		if w.state == terminated && !hasRunning(observed) {
			if err := w.removeCgroup(ctx, pod); err != nil {
				logger.V(2).Info("Removing the cgroup of a finished pod failed, will retry", "err", err.Error())
				return time.Second, false
			}
			if err := w.releaseVolumes(ctx, pod); err != nil {
				logger.Error(err, "Tearing down the volumes of a finished pod failed, will retry")
				return time.Second, false
			}
		}
		return resync, false
	}
	switch w.admit(ctx, pod, observed) {
	case undecided:
		return time.Second, false
	case rejected:
		w.setState(terminated)
		return resync, false
	}
	if reason, msg, exceeded := w.pastDeadline(pod); exceeded {
		w.d.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, reason, msg)
		if err := w.terminate(ctx, pod, observed); err != nil {
			logger.Error(err, "Stopping a pod past its deadline failed, will retry")
			return time.Second, false
		}
		w.setState(terminated)
		final, err := w.d.cfg.Cache.GetNewerThan(ctx, w.uid, w.d.cfg.Clock.Now())
		if err != nil {
			return 0, true
		}
		st := w.computeStatus(pod, final, true)
		st.Phase, st.Reason, st.Message = v1.PodFailed, reason, msg
		w.d.cfg.Status.SetFinal(pod, st)
		return w.afterEnd(ctx, pod), false
	}
	next, ended := w.syncPod(ctx, pod, observed)
	if ended {
		if err := w.terminate(ctx, pod, observed); err != nil {
			logger.Error(err, "Stopping finished pod failed, will retry")
			return time.Second, false
		}
		w.setState(terminated)
		final, err := w.d.cfg.Cache.GetNewerThan(ctx, w.uid, w.d.cfg.Clock.Now())
		if err != nil {
			return 0, true
		}
		w.d.cfg.Status.SetFinal(pod, w.computeStatus(pod, final, true))
		return w.afterEnd(ctx, pod), false
	}
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil && pod.Status.StartTime != nil {
		left := pod.Status.StartTime.Add(time.Duration(*d) * time.Second).Sub(w.d.cfg.Clock.Now())
		next = min(next, max(left, 100*time.Millisecond))
	}
	return min(next, resync), false
}

// afterEnd tears down the volumes of a pod that has just ended and says
// when to look again: soon if that failed.
func (w *Worker) afterEnd(ctx context.Context, pod *v1.Pod) time.Duration {
	if err := w.releaseVolumes(ctx, pod); err != nil {
		klog.FromContext(ctx).Error(err, "Tearing down the volumes of a finished pod failed, will retry")
		return time.Second
	}
	return w.d.cfg.ResyncPeriod
}

// Reason and message of a pod failed for running past activeDeadlineSeconds,
// as the kubelet words them.
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// pastDeadline says whether the pod has been active longer than its
// activeDeadlineSeconds, counted from its start time.
func (w *Worker) pastDeadline(pod *v1.Pod) (string, string, bool) {
	d := pod.Spec.ActiveDeadlineSeconds
	if d == nil || pod.Status.StartTime == nil {
		return "", "", false
	}
	if w.d.cfg.Clock.Since(pod.Status.StartTime.Time) < time.Duration(*d)*time.Second {
		return "", "", false
	}
	return reasonDeadlineExceeded, messageDeadlineExceeded, true
}

// acted notes that the runtime was changed, so that the next pass waits
// for a relist that shows it.
func (w *Worker) acted() {
	w.lastActed = w.d.cfg.Clock.Now()
	w.d.cfg.Relister.RelistSoon()
	w.poke()
}

func (w *Worker) computeStatus(pod *v1.Pod, observed *runtime.PodStatus, terminal bool) v1.PodStatus {
	return status.Compute(status.Input{
		Pod: pod, Observed: observed, Waiting: w.waiting, Terminal: terminal,
		NodeIPs: w.d.cfg.NodeIPs, RuntimeName: w.d.cfg.RuntimeName, Now: w.d.cfg.Clock.Now(),
		Probes: w.statusProbes,
	})
}

func isTerminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

// hasRunning says whether any container or sandbox of the pod may still
// hold processes.
func hasRunning(observed *runtime.PodStatus) bool {
	for _, c := range observed.Containers {
		if c.State == runtime.ContainerRunning || c.State == runtime.ContainerCreated || c.State == runtime.ContainerUnknown {
			return true
		}
	}
	for _, sb := range observed.Sandboxes {
		if sb.Ready {
			return true
		}
	}
	return false
}

// setState moves the pod on; a pod that stopped running no longer holds
// node resources for admission.
func (w *Worker) setState(s workerState) {
	w.state = s
	if s != syncing {
		w.ended.Store(true)
	}
}
