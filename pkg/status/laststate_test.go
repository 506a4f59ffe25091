package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

func TestLastTerminationStateIsOfAContainerThatRan(t *testing.T) {
	named := func(c *runtime.ContainerStatus, id string) *runtime.ContainerStatus { c.ID = id; return c }
	leftover := func(id string) *runtime.ContainerStatus {
		return &runtime.ContainerStatus{ID: id, Name: "c", State: runtime.ContainerCreated}
	}
	tests := []struct {
		name     string
		observed *runtime.PodStatus // oldest first
		want     string             // the last state's containerID, "" for none
	}{
		{name: "one container: none", observed: observed(ctr("c", runtime.ContainerRunning, 0))},
		{name: "the one before ended", observed: observed(named(ctr("c", runtime.ContainerExited, 1), "old"), ctr("c", runtime.ContainerRunning, 0)),
			want: "containerd://old"},
		{name: "the one before never started: none", observed: observed(leftover("old"), ctr("c", runtime.ContainerRunning, 0))},
		{name: "past one that never started, the one that ended", observed: observed(named(ctr("c", runtime.ContainerExited, 2), "older"), leftover("old"), ctr("c", runtime.ContainerRunning, 0)),
			want: "containerd://older"},
		{name: "the one before still runs: none", observed: observed(named(ctr("c", runtime.ContainerRunning, 0), "old"), ctr("c", runtime.ContainerRunning, 0))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := Compute(Input{Pod: pod(v1.RestartPolicyAlways), Observed: tt.observed, Now: t0, RuntimeName: "containerd"})
			last := st.ContainerStatuses[0].LastTerminationState
			if last.Waiting != nil || last.Running != nil {
				t.Fatalf("last state = %+v, want only a termination", last)
			}
			got := ""
			if last.Terminated != nil {
				got = last.Terminated.ContainerID
			}
			if got != tt.want {
				t.Errorf("last state of %q, want %q", got, tt.want)
			}
		})
	}
}
