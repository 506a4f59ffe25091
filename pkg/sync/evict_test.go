package sync

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if err := h.d.Evict(pod.UID, "Evicted", "x", 1, nil); !errors.Is(err, ErrNotRunning) {
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
	disruption := &v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonTerminationByKubelet, Message: msg}
	if err := h.d.Evict(pod.UID, "Evicted", msg, 1, disruption); err != nil {
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
	if c := condition(f, v1.DisruptionTarget); c == nil || c.Status != v1.ConditionTrue || c.Reason != v1.PodReasonTerminationByKubelet ||
		c.Message != msg || c.LastTransitionTime.IsZero() {
		t.Errorf("DisruptionTarget = %+v, want True/TerminationByKubelet with the message, transitioned", c)
	}
	if !h.d.PodEnded(pod.UID) || len(h.d.ActivePods()) != 0 {
		t.Error("an evicted pod still counts as running")
	}
	if err := h.d.Evict(pod.UID, "Evicted", msg, 1, nil); !errors.Is(err, ErrNotRunning) {
		t.Errorf("second Evict = %v, want ErrNotRunning", err)
	}
}

// TestEndStatusCondition: an ending's condition joins the final status,
// in place of one of its type that the computed status carries, and an
// ending without one leaves the conditions alone.
func TestEndStatusCondition(t *testing.T) {
	now := metav1.NewTime(t0)
	evicted := &v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonTerminationByKubelet, Message: "low"}
	computed := func() v1.PodStatus {
		return v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{
			{Type: v1.PodReady, Status: v1.ConditionFalse},
			{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "PreemptionByScheduler"},
		}}
	}
	tests := []struct {
		name string
		end  ending
		want []v1.PodCondition
	}{
		{name: "eviction with a condition", end: ending{reason: "Evicted", message: "low", condition: evicted},
			want: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse},
				{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonTerminationByKubelet, Message: "low", LastTransitionTime: now}}},
		{name: "eviction without one", end: ending{reason: "Evicted", message: "low"}, want: computed().Conditions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := endStatus(tt.end, basePod(), now, computed)
			if st.Phase != v1.PodFailed || st.Reason != "Evicted" {
				t.Errorf("phase/reason = %s/%s, want Failed/Evicted", st.Phase, st.Reason)
			}
			if !equality.Semantic.DeepEqual(st.Conditions, tt.want) {
				t.Errorf("conditions =\n %+v\nwant\n %+v", st.Conditions, tt.want)
			}
		})
	}
	if evicted.LastTransitionTime != (metav1.Time{}) {
		t.Error("endStatus modified the ending's condition")
	}
}

func condition(st *v1.PodStatus, t v1.PodConditionType) *v1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}
