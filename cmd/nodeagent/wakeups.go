package main

import (
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/runtime"
	podsync "github.com/nodeagent/nodeagent/pkg/sync"
)

// podWaker is what pod wake-ups are delivered to.
type podWaker interface {
	// Wake wakes the worker of a pod whose runtime state changed.
	Wake(ref runtime.PodRef)
	// WakePod wakes the worker of a pod whose probe verdict changed.
	WakePod(uid types.UID)
}

var _ podWaker = (*podsync.Dispatcher)(nil)

// podWakeups carries wake-ups to the pod dispatcher from the components
// built before it: the PLEG (a pod's runtime state changed) and the prober
// (a probe's verdict changed). They must come first, since the dispatcher
// reads the PLEG's cache and hands pods to the prober; so they are given
// this forwarder, and the dispatcher is bound to it once built.
//
// Contract: bind is called before any of them runs. A wake-up that comes
// with nothing bound is dropped, never a nil dereference; that loses no
// work, since a worker that starts later reads the cache, level-triggered.
type podWakeups struct {
	target atomic.Pointer[boundWaker]
}

// boundWaker holds the bound podWaker, for atomic.Pointer.
type boundWaker struct{ podWaker }

// bind makes to the receiver of every wake-up from now on.
func (w *podWakeups) bind(to podWaker) { w.target.Store(&boundWaker{to}) }

// wake is the PLEG's OnChange.
func (w *podWakeups) wake(ref runtime.PodRef) {
	if t := w.target.Load(); t != nil {
		t.Wake(ref)
	}
}

// wakePod is the prober's OnChange.
func (w *podWakeups) wakePod(uid types.UID) {
	if t := w.target.Load(); t != nil {
		t.WakePod(uid)
	}
}
