package sync

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

// Tracer makes spans of the steps the Timeline records (pkg/timeline's
// Tracer): one per pod start, from admission to readiness, and one per
// pod termination, from the decision to end the pod to its cleanup, each
// with a child per step; the context of a step carries its span to the
// runtime's calls.
type Tracer interface {
	// Admitted opens the pod's start with its admission step.
	Admitted(ctx context.Context, pod timeline.Pod, st timeline.Step)
	// Pass returns the context of a worker's pass, p saying what it does:
	// with the pod's start while it is starting, with its termination
	// while it ends. A pass that ends the pod ends its start and begins
	// its termination; one with nothing left to do for the ended pod ends
	// its termination.
	Pass(ctx context.Context, pod timeline.Pod, p timeline.Pass, at time.Time) context.Context
	// Step opens the span of a step; the context returned carries it.
	Step(ctx context.Context, pod timeline.Pod, step string, at time.Time) (context.Context, timeline.StepSpan)
	// Record makes the span of a finished step not timed as it ran.
	Record(ctx context.Context, pod timeline.Pod, st timeline.Step)
	// ObserveStatus takes the status just computed for a running pod:
	// a ready (or ended) one ends the pod's start.
	ObserveStatus(pod timeline.Pod, st *v1.PodStatus, at time.Time)
	// Forget ends what is left open of the pod's spans: its worker
	// stopped.
	Forget(uid types.UID, at time.Time)
}

var _ Tracer = (*timeline.Tracer)(nil)

type noTracer struct{}

func (noTracer) Admitted(context.Context, timeline.Pod, timeline.Step) {}
func (noTracer) Pass(ctx context.Context, _ timeline.Pod, _ timeline.Pass, _ time.Time) context.Context {
	return ctx
}
func (noTracer) Step(ctx context.Context, _ timeline.Pod, _ string, _ time.Time) (context.Context, timeline.StepSpan) {
	return ctx, timeline.StepSpan{}
}
func (noTracer) Record(context.Context, timeline.Pod, timeline.Step)  {}
func (noTracer) ObserveStatus(timeline.Pod, *v1.PodStatus, time.Time) {}
func (noTracer) Forget(types.UID, time.Time)                          {}

// tracedPass is what carrying s out does to the pod, as its spans see it
// (st is the state s was decided from): the steps that end the pod run
// under its termination, and the first pass that finds nothing left to
// do for the ended pod (it idles until the pod is deleted, or the worker
// is done) ends it. It is pure.
func tracedPass(st *podState, s step, pod *v1.Pod, removed bool) timeline.Pass {
	switch s.kind {
	case stepSync:
		return timeline.Pass{}
	case stepIdle:
		switch st.phase {
		case phaseSyncing:
			return timeline.Pass{}
		case phaseTerminated:
			return timeline.Pass{Outcome: timeline.EndedKept}
		}
		return timeline.Pass{Outcome: timeline.EndedCleaned}
	case stepDone:
		return timeline.Pass{Outcome: timeline.EndedCleaned}
	}
	return timeline.Pass{Ending: true, Reason: endReason(st, s, pod, removed), GracePeriod: s.grace}
}

// endReason says why the pod's termination begins: its removal or
// deletion, else what ends it (the ending s begins, or the one the pod
// ended with). An ending with a reason of its own is an eviction unless
// it is the deadline's or an admission's refusal.
func endReason(st *podState, s step, pod *v1.Pod, removed bool) string {
	switch {
	case removed:
		return timeline.EndRemoved
	case pod.DeletionTimestamp != nil:
		return timeline.EndDeleted
	}
	e := st.end
	if s.begin != nil {
		e = *s.begin
	}
	switch {
	case e.rejected:
		return timeline.EndRejected
	case e.reason == reasonDeadlineExceeded:
		return timeline.EndDeadlineExceeded
	case e.reason != "":
		return timeline.EndEvicted
	case e.quiet:
		return timeline.EndFoundEnded
	}
	return timeline.EndCompleted
}
