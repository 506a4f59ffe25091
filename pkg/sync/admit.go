package sync

import (
	"context"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/admission"
	"github.com/nodeagent/nodeagent/pkg/qos"
	"github.com/nodeagent/nodeagent/pkg/timeline"
)

// sourceSyncPoll is how often admission looks whether the pod source has
// listed every pod bound here; it only waits for that once, at start.
const sourceSyncPoll = 50 * time.Millisecond

// queueLocked starts the worker of a pod new to the agent, or queues the
// pod for admission. A pod that already ran (known: it has something in
// the runtime or on disk; or a start time from an earlier run of the
// agent) was admitted before and is not judged again, so that a
// restarted agent never rejects what it admitted; nor is a pod that is
// ending anyway. A static pod whose name another static pod still holds
// (the file changed: the old pod is stopping) waits in the queue until
// that one's worker is done, as the kubelet never runs two static pods of
// one name at once. d.mu is held.
func (d *Dispatcher) queueLocked(pod *v1.Pod, known bool) {
	if _, ok := d.pending[pod.UID]; ok {
		d.pending[pod.UID] = pod
	} else if (d.cfg.Admitter == nil || !needsAdmission(pod) || known) && !d.nameHeldLocked(pod) {
		w := d.newWorker(pod)
		// A pod deleted before it ever ran here holds nothing.
		w.ended.Store(pod.DeletionTimestamp != nil && pod.Status.StartTime == nil && !known)
		d.startLocked(w)
		return
	} else {
		d.pending[pod.UID] = pod
		if d.cfg.Admitter == nil || known {
			d.preadmitted[pod.UID] = true
		}
	}
	d.wakeAdmission()
}

func (d *Dispatcher) wakeAdmission() {
	select {
	case d.admitWake <- struct{}{}:
	default:
	}
}

// nameHeldLocked says whether pod is a static pod whose namespace and
// name belong to the worker of another pod. d.mu is held.
func (d *Dispatcher) nameHeldLocked(pod *v1.Pod) bool {
	if !isStatic(pod) {
		return false
	}
	for uid, w := range d.workers {
		if uid == pod.UID {
			continue
		}
		if p, _ := w.latest(); p != nil && p.Namespace == pod.Namespace && p.Name == pod.Name {
			return true
		}
	}
	return false
}

// Running says whether a worker still holds a pod of that namespace and
// name: the pod has not finished stopping and cleaning up.
func (d *Dispatcher) Running(namespace, name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.workers {
		if p, _ := w.latest(); p != nil && p.Namespace == namespace && p.Name == name {
			return true
		}
	}
	return false
}

// isStatic: a pod from a manifest rather than the apiserver.
func isStatic(pod *v1.Pod) bool {
	src, ok := pod.Annotations[configSourceAnnotation]
	return ok && src != "api"
}

const configSourceAnnotation = "kubernetes.io/config.source"

// needsAdmission says whether a pod new to this run of the agent is to
// be judged.
func needsAdmission(pod *v1.Pod) bool {
	return pod.Status.StartTime == nil && pod.DeletionTimestamp == nil && !isTerminal(pod.Status.Phase)
}

// known says whether the runtime or the disk holds anything of the pod.
func (d *Dispatcher) known(uid types.UID) bool {
	if d.cfg.KnownPod != nil {
		return d.cfg.KnownPod(uid)
	}
	for _, ref := range d.cfg.Known() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

// admitLoop judges pending pods, oldest first, until ctx ends. Pods of
// the apiserver wait until every pod bound here is known; static pods do
// not, since they may be what brings the apiserver up.
func (d *Dispatcher) admitLoop(ctx context.Context) {
	// A real ticker, like the polling it replaces: the source's sync is
	// not a matter of the injected clock.
	t := time.NewTicker(sourceSyncPoll)
	defer t.Stop()
	for {
		listed := d.listed()
		d.admitPending(ctx, listed)
		tick := t.C
		if listed {
			tick = nil // nothing left to wait for but new pods
		}
		select {
		case <-ctx.Done():
			return
		case <-d.admitWake:
		case <-tick:
		}
	}
}

// admitPending judges every pending pod in the order they were created,
// each against the node and the pods admitted before it, and starts its
// worker: to run, or to report its rejection. Until the source has
// listed, only static pods are judged.
func (d *Dispatcher) admitPending(ctx context.Context, listed bool) {
	d.mu.Lock()
	queue := make([]*v1.Pod, 0, len(d.pending))
	for _, pod := range d.pending {
		if listed || isStatic(pod) {
			queue = append(queue, pod)
		}
	}
	d.mu.Unlock()
	slices.SortFunc(queue, func(a, b *v1.Pod) int {
		if createdBefore(a, b) {
			return -1
		}
		return 1
	})
	for _, pod := range queue {
		if ctx.Err() != nil {
			return
		}
		d.admit(ctx, pod.UID)
	}
}

// admit judges one pending pod, if it still is, and starts its worker.
func (d *Dispatcher) admit(ctx context.Context, uid types.UID) {
	d.judging.Lock()
	defer d.judging.Unlock()
	d.mu.Lock()
	pod, ok := d.pending[uid]
	if !ok || d.nameHeldLocked(pod) {
		d.mu.Unlock()
		return
	}
	preadmitted := d.preadmitted[uid]
	admitted := d.admittedLocked()
	d.mu.Unlock()

	var r admission.Result
	if needsAdmission(pod) && !preadmitted {
		logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
		node, err := d.cfg.Node(ctx)
		if err != nil {
			logger.Error(err, "Cannot get the node to admit a pod against")
			node = nil
		}
		start := d.cfg.Clock.Now()
		r = d.cfg.Admitter.Admit(logger, pod, node, admitted)
		step := timeline.Step{Name: "admit", Start: start, End: d.cfg.Clock.Now()}
		if r.Admit {
			logger.V(2).Info("Pod step done", "step", "admit", "duration", d.cfg.Clock.Since(start))
		} else {
			logger.Info("Pod step failed", "step", "admit", "duration", d.cfg.Clock.Since(start), "err", r.Reason+": "+r.Message)
			step.Error = r.Reason + ": " + r.Message
		}
		d.deps.timeline.Record(timelinePod(pod), step)
		d.deps.tracer.Admitted(ctx, timelinePod(pod), step)
	} else {
		r.Admit = true // it started ending while it waited, and never ran
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.pending[uid]; !ok {
		return // removed while it was judged
	}
	delete(d.pending, uid)
	delete(d.preadmitted, uid)
	w := d.newWorker(pod)
	w.ended.Store(!needsAdmission(pod))
	if !r.Admit {
		d.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, r.Reason, "%s", r.Message)
		w.state = podState{phase: phaseTerminated, released: true,
			end: ending{rejected: true, reason: r.Reason, message: r.StatusMessage()}}
		w.ended.Store(true)
	}
	d.startLocked(w)
}

// rejectedStatus is the final status of a pod admission refused, as the
// kubelet writes it: for the generation it refused (the status manager
// adds the start time).
func rejectedStatus(pod *v1.Pod, reason, message string) v1.PodStatus {
	return v1.PodStatus{Phase: v1.PodFailed, Reason: reason, Message: message, QOSClass: qos.Class(pod),
		ObservedGeneration: pod.Generation}
}

// admittedLocked are the pods that hold node resources, with the
// resources allocated to them: those of every worker whose pod has not
// ended. d.mu is held.
func (d *Dispatcher) admittedLocked() []*v1.Pod {
	var out []*v1.Pod
	for _, w := range d.workers {
		if w.ended.Load() {
			continue
		}
		pod, removed := w.latest()
		if removed || pod == nil || isTerminal(pod.Status.Phase) {
			continue
		}
		// What it was given, not a resize it waits for.
		allocated, _ := d.deps.alloc.Apply(pod)
		out = append(out, allocated)
	}
	return out
}

// createdBefore orders pods by creation, then by UID.
func createdBefore(a, b *v1.Pod) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.UID < b.UID
}
