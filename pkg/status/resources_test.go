package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestSetResourcesReportsWhatWasApplied(t *testing.T) {
	q := resource.MustParse
	spec := v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: q("500m"), v1.ResourceMemory: q("64Mi"), v1.ResourceEphemeralStorage: q("1Gi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: q("1")},
	}
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "run", Resources: spec}, {Name: "wait", Resources: spec}, {Name: "new"}}}}
	st := v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{
		{Name: "run", ContainerID: "x://1", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}},
		{Name: "wait", ContainerID: "x://2", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}},
		{Name: "new"},
	}}
	applied := v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: q("250m"), v1.ResourceMemory: q("64Mi")},
		Limits: v1.ResourceList{v1.ResourceCPU: q("2")}}
	setResources(pod, &st, Input{Actuated: func(string) (v1.ResourceRequirements, bool) { return applied, true }})

	run, wait, fresh := st.ContainerStatuses[0], st.ContainerStatuses[1], st.ContainerStatuses[2]
	if run.Resources == nil || !run.Resources.Requests.Cpu().Equal(q("250m")) || !run.Resources.Limits.Cpu().Equal(q("2")) ||
		!run.Resources.Requests.StorageEphemeral().Equal(q("1Gi")) {
		t.Errorf("running container's resources = %+v, want the applied cpu and the spec's storage", run.Resources)
	}
	if !run.AllocatedResources.Cpu().Equal(q("500m")) {
		t.Errorf("allocatedResources = %v, want the spec's requests", run.AllocatedResources)
	}
	if wait.Resources == nil || !wait.Resources.Requests.Cpu().Equal(q("500m")) {
		t.Errorf("a container not running reports what was allocated, got %+v", wait.Resources)
	}
	if fresh.Resources != nil || fresh.AllocatedResources != nil {
		t.Errorf("a container never created reports resources: %+v", fresh)
	}
}
