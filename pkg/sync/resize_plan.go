package sync

import (
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/allocation"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// containerResize is a running container whose allocated resources (the
// pod's spec as the worker sees it) differ from those last applied to it,
// and whose resize policy lets them be applied in place.
type containerResize struct {
	// name is the container's; init says it is a sidecar.
	name string
	init bool
	// id is the running container's runtime ID.
	id string
	// shrinks: a limit or request of it goes down; those are applied
	// before the ones that grow, so that the pod never holds more at
	// once than it was given.
	shrinks bool
}

// resizeKey are the four values of a container's resources a resize may
// change, as the cgroups see them: milli-cpu and bytes.
type resizeKey struct {
	cpuRequest, cpuLimit, memRequest, memLimit int64
}

func keyOf(r v1.ResourceRequirements) resizeKey {
	return resizeKey{
		cpuRequest: r.Requests.Cpu().MilliValue(), cpuLimit: r.Limits.Cpu().MilliValue(),
		memRequest: r.Requests.Memory().Value(), memLimit: r.Limits.Memory().Value(),
	}
}

// resizeRestarts says whether applying want to a container that has
// applied needs the container restarted: a value that changes whose
// resource's resizePolicy is RestartContainer (NotRequired is the
// default).
func resizeRestarts(c *v1.Container, applied, want resizeKey) bool {
	policy := func(name v1.ResourceName) bool {
		for _, p := range c.ResizePolicy {
			if p.ResourceName == name {
				return p.RestartPolicy == v1.RestartContainer
			}
		}
		return false
	}
	cpu := applied.cpuRequest != want.cpuRequest || applied.cpuLimit != want.cpuLimit
	mem := applied.memRequest != want.memRequest || applied.memLimit != want.memLimit
	return (cpu && policy(v1.ResourceCPU)) || (mem && policy(v1.ResourceMemory))
}

// planResizes adds to plan what the pod's running containers need for
// their resources to be what is allocated: a container whose resize
// policy asks for it is restarted (killed, and an app container started
// again in the same pass; a sidecar is started again by the next), the
// others are updated in place, those that shrink first. A container
// without an applied record was started with what it has now. Nothing is
// resized while the pod's sandbox is being replaced, nor a container
// this plan kills anyway. actuated are the resources last applied, by
// container name.
func planResizes(pod *v1.Pod, observed *runtime.PodStatus, plan *podActions, actuated allocation.Containers) {
	if plan.KillPod || plan.CreateSandbox || plan.SandboxID == "" {
		return
	}
	killed := map[string]bool{}
	for _, id := range plan.ContainersToKill {
		killed[id] = true
	}
	for _, k := range plan.ProbeKills {
		killed[k.ID] = true
	}
	consider := func(c *v1.Container, init bool, index int) {
		running := latestIn(observed, c.Name, init, plan.SandboxID)
		if running == nil || running.State != runtime.ContainerRunning || killed[running.ID] {
			return
		}
		applied, ok := actuated[c.Name]
		if !ok {
			return
		}
		have, want := keyOf(applied), keyOf(c.Resources)
		if have == want {
			return
		}
		if resizeRestarts(c, have, want) {
			plan.ResizeRestarts = append(plan.ResizeRestarts, running.ID)
			if !init && !slices.Contains(plan.ContainersToStart, index) {
				plan.ContainersToStart = append(plan.ContainersToStart, index)
			}
			return
		}
		plan.ContainersToResize = append(plan.ContainersToResize, containerResize{
			name: c.Name, init: init, id: running.ID,
			shrinks: want.cpuRequest < have.cpuRequest || want.cpuLimit < have.cpuLimit ||
				want.memRequest < have.memRequest || want.memLimit < have.memLimit,
		})
	}
	for i := range pod.Spec.InitContainers {
		if status.IsSidecar(&pod.Spec.InitContainers[i]) {
			consider(&pod.Spec.InitContainers[i], true, i)
		}
	}
	for i := range pod.Spec.Containers {
		consider(&pod.Spec.Containers[i], false, i)
	}
	slices.SortStableFunc(plan.ContainersToResize, func(a, b containerResize) int {
		switch {
		case a.shrinks == b.shrinks:
			return 0
		case a.shrinks:
			return -1
		}
		return 1
	})
}
