package sync

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestDecideEviction(t *testing.T) {
	grace := int64(60)
	tests := []struct {
		name      string
		evict     *eviction
		phase     phase
		want      stepKind
		wantGrace int64
		wantEnd   *ending
	}{
		{name: "no eviction: the pod syncs", want: stepSync},
		{name: "evicted: stopped with the eviction's ending and grace", evict: &eviction{reason: "Evicted", message: "low", grace: 1},
			want: stepStop, wantGrace: minGracePeriod, wantEnd: &ending{reason: "Evicted", message: "low"}},
		{name: "soft eviction: the pod's own grace when shorter", evict: &eviction{reason: "Evicted", message: "low", grace: 300},
			want: stepStop, wantGrace: grace, wantEnd: &ending{reason: "Evicted", message: "low"}},
		{name: "soft eviction: the eviction's grace when shorter", evict: &eviction{reason: "Evicted", message: "low", grace: 10},
			want: stepStop, wantGrace: 10, wantEnd: &ending{reason: "Evicted", message: "low"}},
		{name: "a retried stop keeps the eviction's grace", evict: &eviction{reason: "Evicted", grace: 10}, phase: phaseTerminating,
			want: stepStop, wantGrace: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := basePod(func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = &grace })
			st := podState{phase: tt.phase}
			s := decide(&st, input{pod: pod, observed: obs(running("a"), running("b")), now: t0, resync: DefaultResyncPeriod, evict: tt.evict})
			if s.kind != tt.want {
				t.Fatalf("step = %s, want %s", s.kind, tt.want)
			}
			if tt.want != stepStop {
				return
			}
			if s.grace != tt.wantGrace {
				t.Errorf("grace = %d, want %d", s.grace, tt.wantGrace)
			}
			if tt.wantEnd != nil && (s.begin == nil || *s.begin != *tt.wantEnd) {
				t.Errorf("ending = %+v, want %+v", s.begin, tt.wantEnd)
			}
		})
	}
}

func TestEvictedPodEndsFailedWithTheEvictionsStatus(t *testing.T) {
	pod := basePod()
	h := newHarness(t, pod)
	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 2 {
		t.Fatalf("running = %v, want a and b", got)
	}
	if err := h.d.Evict(pod.UID, "Evicted", "x", 1); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Evict of a pod without a worker = %v, want ErrNotRunning", err)
	}
	h.d.mu.Lock()
	h.d.workers[pod.UID] = h.w
	h.d.mu.Unlock()
	if got := h.d.ActivePods(); len(got) != 1 || got[0].UID != pod.UID {
		t.Fatalf("ActivePods = %v, want the pod", got)
	}
	if h.d.PodEnded(pod.UID) {
		t.Fatal("PodEnded before the eviction")
	}
	msg := "The node was low on resource: memory. "
	if err := h.d.Evict(pod.UID, "Evicted", msg, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3 && h.status.final == nil; i++ {
		h.sync(pod, false)
	}
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 0 {
		t.Errorf("running after the eviction = %v, want none", got)
	}
	f := h.status.final
	if f == nil || f.Phase != v1.PodFailed || f.Reason != "Evicted" || f.Message != msg {
		t.Fatalf("final status = %+v, want Failed/Evicted with the message", f)
	}
	if !h.d.PodEnded(pod.UID) || len(h.d.ActivePods()) != 0 {
		t.Error("an evicted pod still counts as running")
	}
	if err := h.d.Evict(pod.UID, "Evicted", msg, 1); !errors.Is(err, ErrNotRunning) {
		t.Errorf("second Evict = %v, want ErrNotRunning", err)
	}
}
