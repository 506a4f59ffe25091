package sync

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Metrics is told how pod workers fare (*metrics.Metrics is one).
type Metrics interface {
	// ObservePodWorker records one pass of a worker: create (its first),
	// update (after a spec change), sync or kill (termination).
	ObservePodWorker(operation string, d time.Duration)
	// ObservePodStart records how long after the agent first saw a pod
	// it was first running.
	ObservePodStart(sinceFirstSeen time.Duration)
	// ObservePodStartSLI records how long after its creation a pod had
	// every container running: sli without the time spent pulling images
	// and running init containers, total with it.
	ObservePodStartSLI(sli, total time.Duration)
}

type noMetrics struct{}

func (noMetrics) ObservePodWorker(string, time.Duration)          {}
func (noMetrics) ObservePodStart(time.Duration)                   {}
func (noMetrics) ObservePodStartSLI(time.Duration, time.Duration) {}

// Operation types of a worker's pass, as the kubelet labels
// kubelet_pod_worker_duration_seconds.
const (
	opCreate = "create"
	opUpdate = "update"
	opSync   = "sync"
	opKill   = "kill"
)

// startTracker follows one pod's start for the start latency metrics.
type startTracker struct {
	firstSeen time.Time
	// sli: the pod had not started anywhere when the agent first saw it,
	// so its start from creation is this agent's doing.
	sli                      bool
	runningSeen, sliRecorded bool
	// pulls are the spans spent pulling the pod's images.
	pulls [][2]time.Time
}

func newStartTracker(pod *v1.Pod, now time.Time) startTracker {
	return startTracker{firstSeen: now, sli: pod.Status.StartTime == nil}
}

// pulled notes an image pull (with its wait for a pull slot) of the pod.
func (s *startTracker) pulled(from, to time.Time) {
	s.pulls = append(s.pulls, [2]time.Time{from, to})
}

// observe looks at the status just computed for the pod and records the
// pod's first start, once.
func (s *startTracker) observe(m Metrics, pod *v1.Pod, st v1.PodStatus, now time.Time) {
	if !s.runningSeen && st.Phase == v1.PodRunning {
		s.runningSeen = true
		// A pod the apiserver already shows running started before this
		// agent did: its start is not this agent's to measure.
		if pod.Status.Phase != v1.PodRunning {
			m.ObservePodStart(now.Sub(s.firstSeen))
		}
	}
	if !s.sli || s.sliRecorded || !allRunning(pod, st) {
		return
	}
	s.sliRecorded = true
	total := now.Sub(pod.CreationTimestamp.Time)
	sli := total - unionLength(s.pulls) - initRuntime(st)
	m.ObservePodStartSLI(max(sli, 0), max(total, 0))
}

// allRunning says whether every app container is running.
func allRunning(pod *v1.Pod, st v1.PodStatus) bool {
	if len(st.ContainerStatuses) < len(pod.Spec.Containers) {
		return false
	}
	for _, cs := range st.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// initRuntime adds up how long the init containers that ran to
// completion ran.
func initRuntime(st v1.PodStatus) time.Duration {
	var d time.Duration
	for _, cs := range st.InitContainerStatuses {
		if t := cs.State.Terminated; t != nil && !t.StartedAt.IsZero() && t.FinishedAt.After(t.StartedAt.Time) {
			d += t.FinishedAt.Sub(t.StartedAt.Time)
		}
	}
	return d
}

// unionLength is the time covered by the spans, overlaps counted once.
func unionLength(spans [][2]time.Time) time.Duration {
	sorted := append([][2]time.Time(nil), spans...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i][0].Before(sorted[j][0]) })
	var total time.Duration
	var end time.Time
	for _, s := range sorted {
		switch {
		case end.IsZero() || !s[0].Before(end):
			total += s[1].Sub(s[0])
			end = s[1]
		case s[1].After(end):
			total += s[1].Sub(end)
			end = s[1]
		}
	}
	return total
}
