package status

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clienttesting "k8s.io/client-go/testing"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// ownedTypes are the conditions a running pod's status carries from the
// agent, each stamped with the generation it reflects.
var ownedTypes = []v1.PodConditionType{
	v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.PodScheduled,
}

func TestComputeObservesGeneration(t *testing.T) {
	p := pod(v1.RestartPolicyAlways)
	p.Generation = 3
	scheduled := metav1.NewTime(t0.Add(-time.Hour))
	p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: scheduled}}
	resize := v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonDeferred, ObservedGeneration: 2}
	st := Compute(Input{Pod: p, Observed: observed(ctr("c", runtime.ContainerRunning, 0)), Now: t0, ResizeConditions: []v1.PodCondition{resize}})
	if st.ObservedGeneration != 3 {
		t.Errorf("observedGeneration = %d, want 3", st.ObservedGeneration)
	}
	for _, typ := range ownedTypes {
		if c := cond(st, typ); c.ObservedGeneration != 3 {
			t.Errorf("%s observedGeneration = %d, want 3", typ, c.ObservedGeneration)
		}
	}
	// PodScheduled is restated True however the pod was bound; it keeps
	// the scheduler's transition time.
	if c := cond(st, v1.PodScheduled); c.Status != v1.ConditionTrue || !c.LastTransitionTime.Equal(&scheduled) {
		t.Errorf("PodScheduled = %+v, want True since %v", c, scheduled)
	}
	// A resize condition keeps the generation of the resize it is about.
	if c := cond(st, v1.PodResizePending); c.ObservedGeneration != 2 {
		t.Errorf("PodResizePending observedGeneration = %d, want 2", c.ObservedGeneration)
	}
}

// statusPatches are the status patches the fake client was sent, decoded.
func statusPatches(t *testing.T, actions []clienttesting.Action) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, a := range actions {
		pa, ok := a.(clienttesting.PatchAction)
		if !ok || a.GetSubresource() != "status" {
			continue
		}
		var p map[string]any
		if err := json.Unmarshal(pa.GetPatch(), &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func TestManagerWritesGenerationBumpAlone(t *testing.T) {
	p := pod(v1.RestartPolicyAlways)
	disruption := v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "PreemptionByScheduler", ObservedGeneration: 1}
	p.Status.Conditions = []v1.PodCondition{disruption}
	m, client := newManager(t, p)
	ctx := context.Background()
	obs := observed(ctr("c", runtime.ContainerRunning, 0))

	m.Set(p, Compute(Input{Pod: p, Observed: obs, Now: t0}))
	m.writeDue(ctx)
	got, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// A spec update bumps the generation; nothing else changes.
	bumped := got.DeepCopy()
	bumped.Generation = 2
	if _, err := client.CoreV1().Pods(p.Namespace).Update(ctx, bumped, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	m.Set(bumped, Compute(Input{Pod: bumped, Observed: obs, Now: t0.Add(time.Minute)}))
	m.writeDue(ctx)

	patches := statusPatches(t, client.Actions())
	if len(patches) != 1 {
		t.Fatalf("%d status patches for a generation bump, want 1", len(patches))
	}
	status, _ := patches[0]["status"].(map[string]any)
	if status["observedGeneration"] != float64(2) {
		t.Errorf("patch %v does not carry observedGeneration 2", patches[0])
	}
	conds, _ := status["conditions"].([]any)
	if len(conds) != len(ownedTypes) {
		t.Errorf("patch conditions %v, want the %d the agent owns, the foreign one untouched", conds, len(ownedTypes))
	}

	got, _ = client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if got.Status.ObservedGeneration != 2 {
		t.Errorf("observedGeneration = %d, want 2", got.Status.ObservedGeneration)
	}
	for _, typ := range ownedTypes {
		if c := cond(got.Status, typ); c.ObservedGeneration != 2 {
			t.Errorf("%s observedGeneration = %d, want 2", typ, c.ObservedGeneration)
		}
	}
	if c := cond(got.Status, v1.DisruptionTarget); c.ObservedGeneration != 1 || c.Reason != disruption.Reason {
		t.Errorf("foreign condition = %+v, want it kept with its own generation", c)
	}
}

func TestManagerRejectedStatusObservesGeneration(t *testing.T) {
	p := pod(v1.RestartPolicyAlways)
	p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, ObservedGeneration: 1}}
	m, client := newManager(t, p)
	ctx := context.Background()

	// The bare refusal, as pkg/sync hands it over.
	m.SetFinal(p, v1.PodStatus{Phase: v1.PodFailed, Reason: "OutOfcpu", Message: "Pod was rejected: no cpu", QOSClass: v1.PodQOSBurstable})
	m.writeDue(ctx)
	got, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := got.Status
	if st.Phase != v1.PodFailed || st.Reason != "OutOfcpu" || st.ObservedGeneration != 1 {
		t.Errorf("status = %+v, want Failed OutOfcpu for generation 1", st)
	}
	if st.StartTime == nil || !st.StartTime.Time.Equal(t0) {
		t.Errorf("startTime = %v, want %v as the kubelet stamps a refused pod", st.StartTime, t0)
	}
	// The kubelet owns PodScheduled and leaves it out of a refusal.
	if len(st.Conditions) != 0 {
		t.Errorf("conditions = %+v, want none", st.Conditions)
	}
}

func TestManagerNeverTakesGenerationBack(t *testing.T) {
	p := pod(v1.RestartPolicyAlways)
	p.Generation = 5
	p.Status.ObservedGeneration = 5
	m, client := newManager(t, p)
	ctx := context.Background()

	stale := p.DeepCopy()
	stale.Generation = 4
	m.Set(stale, v1.PodStatus{Phase: v1.PodRunning})
	m.writeDue(ctx)
	got, _ := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if got.Status.Phase != v1.PodRunning || got.Status.ObservedGeneration != 5 {
		t.Errorf("status = %+v, want Running still for generation 5", got.Status)
	}
}

func TestMergeKeepsForeignConditionsAsTheyAre(t *testing.T) {
	gate := v1.PodCondition{Type: "example.com/gate", Status: v1.ConditionTrue, ObservedGeneration: 7}
	cur := v1.PodStatus{ObservedGeneration: 1, Conditions: []v1.PodCondition{
		gate, {Type: v1.PodReady, Status: v1.ConditionFalse, ObservedGeneration: 1},
	}}
	got := Merge(cur, v1.PodStatus{ObservedGeneration: 2, Conditions: []v1.PodCondition{
		{Type: v1.PodReady, Status: v1.ConditionTrue, ObservedGeneration: 2},
	}})
	if got.ObservedGeneration != 2 || cond(got, v1.PodReady).ObservedGeneration != 2 {
		t.Errorf("merged = %+v, want generation 2 on the status and its Ready", got)
	}
	if c := cond(got, gate.Type); c != gate {
		t.Errorf("foreign condition = %+v, want %+v", c, gate)
	}
}

// TestMergeDisruptionTarget: the agent's DisruptionTarget (an eviction's)
// replaces the apiserver's rather than joining it, keeps the transition
// time of one of the same status, and stays once written.
func TestMergeDisruptionTarget(t *testing.T) {
	t1, t2 := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	evicted := v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonTerminationByKubelet,
		Message: "The node was low on resource: memory. ", LastTransitionTime: t2}
	final := v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse}, evicted}}
	tests := []struct {
		name string
		cur  []v1.PodCondition
		want v1.PodCondition
	}{
		{name: "none before: the agent's", want: evicted},
		{name: "the scheduler's before: replaced, its transition time kept",
			cur:  []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "PreemptionByScheduler", LastTransitionTime: t1}},
			want: func() v1.PodCondition { c := evicted; c.LastTransitionTime = t1; return c }()},
		{name: "a False one before: replaced with a new transition time",
			cur:  []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionFalse, Reason: "x", LastTransitionTime: t1}},
			want: evicted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Merge(v1.PodStatus{Phase: v1.PodRunning, Conditions: tt.cur}, final)
			n := 0
			for _, c := range got.Conditions {
				if c.Type == v1.DisruptionTarget {
					n++
				}
			}
			if n != 1 || cond(got, v1.DisruptionTarget) != tt.want {
				t.Errorf("conditions = %+v, want one DisruptionTarget %+v", got.Conditions, tt.want)
			}
			// Written once, the condition stays through a later merge of
			// the same final status (the deletion's confirmation).
			again := Merge(got, final)
			if c := cond(again, v1.DisruptionTarget); c != tt.want || len(again.Conditions) != len(got.Conditions) {
				t.Errorf("after a second merge: conditions = %+v", again.Conditions)
			}
		})
	}
	// A status without one (a running pod's) keeps the apiserver's.
	cur := v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "DeletionByTaintManager"}}}
	if got := Merge(cur, v1.PodStatus{Phase: v1.PodRunning}); cond(got, v1.DisruptionTarget).Reason != "DeletionByTaintManager" {
		t.Errorf("conditions = %+v, want the taint manager's DisruptionTarget kept", got.Conditions)
	}
}
