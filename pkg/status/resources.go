package status

import (
	v1 "k8s.io/api/core/v1"
)

// setResources fills the resources of each container the runtime has,
// as the kubelet reports them for in-place resize: allocatedResources
// are the requests the container was given (the pod's spec as allocated),
// resources what its running container has applied (those last applied
// to it, as far as the agent applied them; what was allocated for a
// container not running). The apiserver accepts a resize only for a pod
// whose running containers report resources.
func setResources(pod *v1.Pod, st *v1.PodStatus, in Input) {
	set := func(specs []v1.Container, statuses []v1.ContainerStatus) {
		for i := range statuses {
			cs := &statuses[i]
			if cs.ContainerID == "" {
				continue // never created: the kubelet reports nothing either
			}
			var spec *v1.Container
			for j := range specs {
				if specs[j].Name == cs.Name {
					spec = &specs[j]
				}
			}
			if spec == nil {
				continue
			}
			cs.AllocatedResources = spec.Resources.Requests.DeepCopy()
			r := spec.Resources.DeepCopy()
			if cs.State.Running != nil && in.Actuated != nil {
				if applied, ok := in.Actuated(cs.Name); ok {
					r = appliedResources(*r, applied)
				}
			}
			cs.Resources = r
		}
	}
	set(pod.Spec.InitContainers, st.InitContainerStatuses)
	set(pod.Spec.Containers, st.ContainerStatuses)
	ephemeral := make([]v1.Container, 0, len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.EphemeralContainers {
		ephemeral = append(ephemeral, v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	set(ephemeral, st.EphemeralContainerStatuses)
}

// appliedResources is want with the cpu and memory values that a resize
// changes taken from applied, where both have them: the other resources
// are never resized.
func appliedResources(want, applied v1.ResourceRequirements) *v1.ResourceRequirements {
	out := want.DeepCopy()
	for _, pair := range []struct{ out, applied v1.ResourceList }{{out.Requests, applied.Requests}, {out.Limits, applied.Limits}} {
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			if _, ok := pair.out[name]; !ok {
				continue
			}
			if q, ok := pair.applied[name]; ok {
				pair.out[name] = q.DeepCopy()
			}
		}
	}
	return out
}
