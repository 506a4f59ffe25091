package sync

import (
	gosync "sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeMetrics records what the workers report.
type fakeMetrics struct {
	mu     gosync.Mutex
	passes []string
	starts []time.Duration
	slis   [][2]time.Duration
}

func (f *fakeMetrics) ObservePodWorker(op string, _ time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.passes = append(f.passes, op)
}

func (f *fakeMetrics) ObservePodStart(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts = append(f.starts, d)
}

func (f *fakeMetrics) ObservePodStartSLI(sli, total time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slis = append(f.slis, [2]time.Duration{sli, total})
}

func runningState() v1.ContainerState {
	return v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}}
}

func TestStartTracker(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	created := metav1.NewTime(at(-2))
	pending := v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{{Name: "a", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}}}}
	started := v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "a", State: runningState()}},
		InitContainerStatuses: []v1.ContainerStatus{{Name: "init", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			StartedAt: metav1.NewTime(at(5)), FinishedAt: metav1.NewTime(at(8))}}}}}
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		p.CreationTimestamp = created
	})

	m := &fakeMetrics{}
	s := newStartTracker(pod, t0)
	s.observe(m, pod, pending, at(1))
	// Two overlapping pulls of 4 s over 5 s, one apart of 1 s: 6 s of pulling.
	s.pulled(at(1), at(5))
	s.pulled(at(2), at(6))
	s.pulled(at(9), at(10))
	s.observe(m, pod, started, at(20))
	s.observe(m, pod, started, at(30))
	if len(m.starts) != 1 || m.starts[0] != 20*time.Second {
		t.Errorf("starts = %v, want one of 20s since first seen", m.starts)
	}
	// 22 s since creation, less 6 s pulling and 3 s of init container.
	if len(m.slis) != 1 || m.slis[0] != [2]time.Duration{13 * time.Second, 22 * time.Second} {
		t.Errorf("SLIs = %v, want one of 13s (22s total)", m.slis)
	}

	// A pod that had started before the agent saw it (an agent restart):
	// neither is this agent's to measure.
	m = &fakeMetrics{}
	old := pod.DeepCopy()
	old.Status = v1.PodStatus{Phase: v1.PodRunning, StartTime: &created}
	s = newStartTracker(old, t0)
	s.observe(m, old, started, at(1))
	if len(m.starts)+len(m.slis) != 0 {
		t.Errorf("a pod running before the agent: starts %v SLIs %v", m.starts, m.slis)
	}
}

func TestUnionLength(t *testing.T) {
	t0 := time.Unix(0, 0)
	span := func(a, b int) [2]time.Time {
		return [2]time.Time{t0.Add(time.Duration(a) * time.Second), t0.Add(time.Duration(b) * time.Second)}
	}
	tests := []struct {
		name  string
		spans [][2]time.Time
		want  time.Duration
	}{
		{name: "none"},
		{name: "one", spans: [][2]time.Time{span(1, 4)}, want: 3 * time.Second},
		{name: "contained", spans: [][2]time.Time{span(1, 10), span(2, 3)}, want: 9 * time.Second},
		{name: "unordered overlap", spans: [][2]time.Time{span(5, 8), span(1, 6)}, want: 7 * time.Second},
		{name: "apart", spans: [][2]time.Time{span(1, 2), span(3, 4)}, want: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unionLength(tt.spans); got != tt.want {
				t.Errorf("unionLength = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWorkerReportsPassesAndStart(t *testing.T) {
	pod := basePod(func(p *v1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] })
	pod.CreationTimestamp = metav1.Now()
	h := newHarness(t, pod)
	m := &fakeMetrics{}
	h.w.deps.metrics = m

	pass := func(p *v1.Pod, removed bool) string {
		t.Helper()
		op := h.w.operation(p, removed)
		h.sync(p, removed)
		return op
	}
	if op := pass(pod, false); op != opCreate {
		t.Errorf("first pass = %s, want create", op)
	}
	if op := pass(pod, false); op != opSync {
		t.Errorf("second pass = %s, want sync", op)
	}
	if len(m.starts) != 1 || len(m.slis) != 1 {
		t.Fatalf("after the container runs: starts %v SLIs %v, want one each", m.starts, m.slis)
	}
	changed := pod.DeepCopy()
	changed.Spec.ActiveDeadlineSeconds = new(int64)
	*changed.Spec.ActiveDeadlineSeconds = 3600
	h.w.update(changed, false)
	if op := pass(changed, false); op != opUpdate {
		t.Errorf("pass after a spec change = %s, want update", op)
	}
	if op := pass(changed, false); op != opSync {
		t.Errorf("next pass = %s, want sync", op)
	}
	if len(m.starts) != 1 || len(m.slis) != 1 {
		t.Errorf("start observed again: starts %v SLIs %v", m.starts, m.slis)
	}
	deleted := changed.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	if op := pass(deleted, false); op != opKill {
		t.Errorf("pass of a deleted pod = %s, want kill", op)
	}
}
