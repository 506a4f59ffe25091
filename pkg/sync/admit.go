package sync

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/admission"
	"github.com/nodeagent/nodeagent/pkg/qos"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// admitOutcome is what admit decided.
type admitOutcome int

const (
	admitted admitOutcome = iota
	rejected
	// undecided: the pods bound here are not all known yet; ask again.
	undecided
)

// admit decides, on a pod's first pass, whether it may run here. A pod
// that already ran (it has something in the runtime, or a start time
// from an earlier run of the agent) was admitted before and is not
// judged again, so that a restarted agent never rejects what it
// admitted; a new pod is judged once every pod bound here is known, so
// that it is counted against all of them, and after every pod bound
// before it, so that the same pods win whatever order their workers run
// in. A rejected pod fails, as the kubelet fails it, and nothing of it
// is made.
func (w *Worker) admit(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus) admitOutcome {
	if w.holds.Load() {
		return admitted
	}
	d := w.d
	if d.cfg.Admitter == nil || admittedBefore(pod, observed) {
		w.holds.Store(true)
		return admitted
	}
	if !d.listed() || d.waitingOlder(w.uid, pod) {
		return undecided
	}
	logger := klog.FromContext(ctx)
	d.admitMu.Lock()
	defer d.admitMu.Unlock()
	// Whatever the outcome, the next pod in line may now be judged.
	defer d.pokeWaiting()
	var r admission.Result
	node, err := d.cfg.Node(ctx)
	if err != nil {
		logger.Error(err, "Cannot get the node to admit a pod against")
		node = nil
	}
	err = w.step(ctx, "admit", func() error {
		r = d.cfg.Admitter.Admit(logger, pod, node, d.admittedPods(w.uid))
		if !r.Admit {
			return fmt.Errorf("%s: %s", r.Reason, r.Message)
		}
		return nil
	})
	if err == nil {
		w.holds.Store(true)
		return admitted
	}
	w.ended.Store(true)
	d.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, r.Reason, "%s", r.Message)
	d.cfg.Status.SetFinal(pod, v1.PodStatus{
		Phase: v1.PodFailed, Reason: r.Reason, Message: r.StatusMessage(), QOSClass: qos.Class(pod),
	})
	return rejected
}

// admittedBefore says whether an earlier run of the agent admitted pod.
func admittedBefore(pod *v1.Pod, observed *runtime.PodStatus) bool {
	if observed != nil && len(observed.Sandboxes)+len(observed.Containers) > 0 {
		return true
	}
	return pod.Status.StartTime != nil
}

// admittedPods are the pods that hold node resources, except the one
// being admitted: those admitted in this run and not ended, and those an
// earlier run admitted whose workers have not caught up yet.
func (d *Dispatcher) admittedPods(except types.UID) []*v1.Pod {
	known := map[types.UID]bool{}
	for _, ref := range d.cfg.Known() {
		known[ref.UID] = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*v1.Pod
	for uid, w := range d.workers {
		if uid == except || w.ended.Load() {
			continue
		}
		pod, removed := w.latest()
		if removed || pod == nil || isTerminal(pod.Status.Phase) {
			continue
		}
		if w.holds.Load() || known[uid] || pod.Status.StartTime != nil {
			out = append(out, pod)
		}
	}
	return out
}

// waitingOlder says whether a pod created before pod still waits for its
// admission: it is judged first, as the kubelet admits pods in the order
// they were created.
func (d *Dispatcher) waitingOlder(except types.UID, pod *v1.Pod) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for uid, w := range d.workers {
		if uid == except || w.holds.Load() || w.ended.Load() {
			continue
		}
		other, removed := w.latest()
		if removed || other == nil || other.DeletionTimestamp != nil || isTerminal(other.Status.Phase) || other.Status.StartTime != nil {
			continue
		}
		if createdBefore(other, pod) {
			return true
		}
	}
	return false
}

// createdBefore orders pods by creation, then by UID.
func createdBefore(a, b *v1.Pod) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.UID < b.UID
}

// pokeWaiting wakes the workers of pods not judged yet.
func (d *Dispatcher) pokeWaiting() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.workers {
		if !w.holds.Load() && !w.ended.Load() {
			w.poke()
		}
	}
}
