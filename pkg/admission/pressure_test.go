package admission

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

type pressure []v1.NodeConditionType

func (p pressure) Conditions() []v1.NodeConditionType { return p }

func TestAdmitUnderPressure(t *testing.T) {
	memory := pressure{v1.NodeMemoryPressure}
	disk := pressure{v1.NodeDiskPressure}
	both := pressure{v1.NodeMemoryPressure, v1.NodeDiskPressure}
	bestEffort := func(...func(*v1.Pod)) *v1.Pod { return podReq("p", nil) }
	burstable := podReq("p", rl("memory", "64Mi"))
	tolerate := func(key string) *v1.Pod {
		p := podReq("p", nil)
		p.Spec.Tolerations = []v1.Toleration{{Key: key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
		return p
	}
	critical := podReq("p", nil)
	prio := int32(systemCriticalPriority)
	critical.Spec.Priority = &prio
	tests := []struct {
		name     string
		pressure Pressure
		pod      *v1.Pod
		wantMsg  string // empty: admitted
	}{
		{name: "no pressure", pressure: pressure{}, pod: bestEffort()},
		{name: "no pressure source", pod: bestEffort()},
		{name: "memory pressure refuses BestEffort", pressure: memory, pod: bestEffort(), wantMsg: "The node had condition: [MemoryPressure]. "},
		{name: "memory pressure admits Burstable", pressure: memory, pod: burstable},
		{name: "memory pressure admits BestEffort tolerating its taint", pressure: memory, pod: tolerate(v1.TaintNodeMemoryPressure)},
		{name: "memory pressure: another toleration does not do", pressure: memory, pod: tolerate(v1.TaintNodeDiskPressure),
			wantMsg: "The node had condition: [MemoryPressure]. "},
		{name: "disk pressure refuses every pod", pressure: disk, pod: burstable, wantMsg: "The node had condition: [DiskPressure]. "},
		{name: "disk pressure refuses even a pod tolerating its taint", pressure: disk, pod: tolerate(v1.TaintNodeDiskPressure),
			wantMsg: "The node had condition: [DiskPressure]. "},
		{name: "memory and disk pressure refuse Burstable", pressure: both, pod: burstable,
			wantMsg: "The node had condition: [MemoryPressure DiskPressure]. "},
		{name: "critical pods are admitted", pressure: both, pod: critical},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(Config{Pressure: tt.pressure})
			if err != nil {
				t.Fatal(err)
			}
			r := a.Admit(klog.Background(), tt.pod, baseNode(), nil)
			if tt.wantMsg == "" {
				if !r.Admit {
					t.Fatalf("refused: %+v", r)
				}
				return
			}
			if r.Admit || r.Reason != "Evicted" || r.Message != tt.wantMsg {
				t.Errorf("result = %+v, want Evicted %q", r, tt.wantMsg)
			}
			if got := r.StatusMessage(); got != "Pod was rejected: "+tt.wantMsg {
				t.Errorf("status message = %q", got)
			}
		})
	}
}
