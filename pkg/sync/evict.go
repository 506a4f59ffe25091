package sync

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The eviction manager ends pods to relieve the node. An eviction is an
// ending like DeadlineExceeded: the worker stops the pod (within the
// eviction's grace period, when shorter than the pod's own) and its final
// status is Failed with the eviction's reason and message, and with the
// eviction's condition (DisruptionTarget) when it has one. The manager
// records the Evicted event itself, with its annotations.

// ErrNotRunning says a pod cannot be evicted: the agent does not run it,
// or it is already ending.
var ErrNotRunning = errors.New("pod is not running")

// eviction is a request to end a running pod.
type eviction struct {
	reason, message string
	// grace caps the pod's grace period, in seconds.
	grace int64
	// condition, when set, is put in the final status.
	condition *v1.PodCondition
}

// Evict asks the pod's worker to end the pod: its containers stop within
// grace seconds (or the pod's own grace period, if shorter) and its final
// status is Failed with reason and message, and has condition (replacing
// one of its type) when it is not nil; the condition's transition time is
// when the final status is made. It returns at once. The first eviction of
// a pod is the one that counts.
func (d *Dispatcher) Evict(uid types.UID, reason, message string, grace int64, condition *v1.PodCondition) error {
	d.mu.Lock()
	w, ok := d.workers[uid]
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("evict pod %s: %w", uid, ErrNotRunning)
	}
	if pod, removed := w.latest(); w.ended.Load() || removed || pod == nil || pod.DeletionTimestamp != nil || isTerminal(pod.Status.Phase) {
		return fmt.Errorf("evict pod %s: %w", uid, ErrNotRunning)
	}
	if condition != nil {
		condition = condition.DeepCopy()
	}
	w.evicted.CompareAndSwap(nil, &eviction{reason: reason, message: message, grace: grace, condition: condition})
	w.poke()
	return nil
}

// PodEnded says whether the pod's worker has stopped it (or has no pod of
// that UID any more).
func (d *Dispatcher) PodEnded(uid types.UID) bool {
	d.mu.Lock()
	w, ok := d.workers[uid]
	d.mu.Unlock()
	return !ok || w.ended.Load()
}

// ActivePods are the pods that hold node resources: those whose worker
// runs them and that nothing ends yet, with the resources allocated to
// them. The pods are shared and must not be modified.
func (d *Dispatcher) ActivePods() []*v1.Pod {
	d.mu.Lock()
	workers := make([]*Worker, 0, len(d.workers))
	for _, w := range d.workers {
		workers = append(workers, w)
	}
	d.mu.Unlock()
	var out []*v1.Pod
	for _, w := range workers {
		pod, removed := w.latest()
		if w.ended.Load() || removed || pod == nil || pod.DeletionTimestamp != nil || isTerminal(pod.Status.Phase) {
			continue
		}
		allocated, _ := d.deps.alloc.Apply(pod)
		out = append(out, allocated)
	}
	return out
}

// endOfEviction is the ending an eviction calls for.
func endOfEviction(e *eviction) ending {
	return ending{reason: e.reason, message: e.message, condition: e.condition}
}

// stopGrace is the grace period of a pod's stop step: the pod's own,
// shortened by an eviction's.
func stopGrace(pod *v1.Pod, e *eviction) int64 {
	g := gracePeriod(pod)
	if e != nil {
		g = max(min(g, e.grace), minGracePeriod)
	}
	return g
}
