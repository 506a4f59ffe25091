package node

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPressureConditions(t *testing.T) {
	t0 := metav1.NewTime(testStart)
	t1 := metav1.NewTime(testStart.Add(10 * time.Second))
	find := func(cs []v1.NodeCondition, typ v1.NodeConditionType) v1.NodeCondition {
		for _, c := range cs {
			if c.Type == typ {
				return c
			}
		}
		t.Fatalf("no %s condition in %v", typ, cs)
		return v1.NodeCondition{}
	}
	calm := conditions(nil, nil, nil, t0)
	for _, want := range []v1.NodeCondition{
		{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: v1.NodeDiskPressure, Status: v1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: v1.NodePIDPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
	} {
		got := find(calm, want.Type)
		if got.Status != want.Status || got.Reason != want.Reason || got.Message != want.Message {
			t.Errorf("%s = %+v, want %+v", want.Type, got, want)
		}
	}

	pressed := conditions(calm, nil, []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}, t1)
	for _, want := range []v1.NodeCondition{
		{Type: v1.NodeMemoryPressure, Status: v1.ConditionTrue, Reason: "KubeletHasInsufficientMemory", Message: "kubelet has insufficient memory available"},
		{Type: v1.NodeDiskPressure, Status: v1.ConditionTrue, Reason: "KubeletHasDiskPressure", Message: "kubelet has disk pressure"},
		{Type: v1.NodePIDPressure, Status: v1.ConditionTrue, Reason: "KubeletHasInsufficientPID", Message: "kubelet has insufficient PID available"},
	} {
		got := find(pressed, want.Type)
		if got.Status != want.Status || got.Reason != want.Reason || got.Message != want.Message || !got.LastTransitionTime.Equal(&t1) {
			t.Errorf("%s = %+v, want %+v moved at t1", want.Type, got, want)
		}
	}
	if r := find(pressed, v1.NodeReady); !r.LastTransitionTime.Equal(&t0) {
		t.Errorf("Ready moved with pressure: %+v", r)
	}
}
