package sync

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

// Tracer makes spans of the steps the Timeline records (pkg/timeline's
// Tracer): one per pod start, from admission to readiness, with a child
// per step; the context of a step carries its span to the runtime's
// calls.
type Tracer interface {
	// Admitted opens the pod's start with its admission step.
	Admitted(ctx context.Context, pod timeline.Pod, st timeline.Step)
	// Pass returns the context of a worker's pass: with the pod's start
	// while it is starting. A pass that ends the pod ends its start.
	Pass(ctx context.Context, uid types.UID, ending bool, at time.Time) context.Context
	// Step opens the span of a step; the context returned carries it.
	Step(ctx context.Context, pod timeline.Pod, step string, at time.Time) (context.Context, timeline.StepSpan)
	// Record makes the span of a finished step not timed as it ran.
	Record(ctx context.Context, pod timeline.Pod, st timeline.Step)
	// ObserveStatus takes the status just computed for a running pod:
	// a ready (or ended) one ends the pod's start.
	ObserveStatus(pod timeline.Pod, st *v1.PodStatus, at time.Time)
}

var _ Tracer = (*timeline.Tracer)(nil)

type noTracer struct{}

func (noTracer) Admitted(context.Context, timeline.Pod, timeline.Step) {}
func (noTracer) Pass(ctx context.Context, _ types.UID, _ bool, _ time.Time) context.Context {
	return ctx
}
func (noTracer) Step(ctx context.Context, _ timeline.Pod, _ string, _ time.Time) (context.Context, timeline.StepSpan) {
	return ctx, timeline.StepSpan{}
}
func (noTracer) Record(context.Context, timeline.Pod, timeline.Step)  {}
func (noTracer) ObserveStatus(timeline.Pod, *v1.PodStatus, time.Time) {}
