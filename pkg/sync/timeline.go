package sync

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

// Timeline records each step of a pod's life as it is taken, where it is
// logged (pkg/timeline's Store): the timed steps, admission, images found
// present, and the pod's first readiness.
type Timeline interface {
	// Begin records a step's start; End, with the id it returned, its end.
	Begin(pod timeline.Pod, step string, at time.Time) uint64
	End(uid types.UID, id uint64, at time.Time, err error)
	// Record records a finished step that was not timed as it ran.
	Record(pod timeline.Pod, st timeline.Step)
	// ObserveStatus takes the status just computed for a running pod.
	ObserveStatus(pod timeline.Pod, st *v1.PodStatus, at time.Time)
	// Forget notes that the agent is done with the pod.
	Forget(uid types.UID, at time.Time)
}

type noTimeline struct{}

func (noTimeline) Begin(timeline.Pod, string, time.Time) uint64         { return 0 }
func (noTimeline) End(types.UID, uint64, time.Time, error)              {}
func (noTimeline) Record(timeline.Pod, timeline.Step)                   {}
func (noTimeline) ObserveStatus(timeline.Pod, *v1.PodStatus, time.Time) {}
func (noTimeline) Forget(types.UID, time.Time)                          {}

// timelinePod names a pod in the timeline.
func timelinePod(pod *v1.Pod) timeline.Pod {
	return timeline.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

// timelinePod names the worker's pod in the timeline.
func (w *Worker) timelinePod() timeline.Pod {
	pod, _ := w.latest()
	if pod == nil {
		return timeline.Pod{UID: w.uid}
	}
	return timelinePod(pod)
}

// imagePresent records an image pull step that found the image on the
// node: no pull, no time.
func (w *Worker) imagePresent(ctx context.Context, step string) {
	pod, st := w.timelinePod(), timeline.Step{Name: step, Start: w.deps.clock.Now(), Cached: true}
	w.deps.timeline.Record(pod, st)
	w.deps.tracer.Record(ctx, pod, st)
}
