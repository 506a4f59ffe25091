package sync

import (
	"strings"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// An agent killed while the runtime starts a container cancels the start
// with it: the runtime then reports the container exited, never started,
// with a StartError saying the context was canceled. That container did
// not fail; its start was abandoned with the agent. The kubelet counts it
// as a failed start and restarts the container (restartCount 1 and a
// lastState saying StartError). The next agent instead removes it and
// starts the container again under the same attempt, as though it had
// never been made.

// startAbandoned says whether c is such a container.
func startAbandoned(c *runtime.ContainerStatus) bool {
	return c.State == runtime.ContainerExited && c.StartedAt.IsZero() &&
		c.Reason == "StartError" && strings.Contains(c.Message, "context canceled")
}

// withoutAbandonedStarts returns observed without the containers whose
// start was abandoned, and their IDs, to be removed before the next is
// made (the runtime reserves a container's name, attempt included, until
// it is removed). observed is not changed.
func withoutAbandonedStarts(observed *runtime.PodStatus) (*runtime.PodStatus, []string) {
	if observed == nil {
		return nil, nil
	}
	var abandoned []string
	for _, c := range observed.Containers {
		if startAbandoned(c) {
			abandoned = append(abandoned, c.ID)
		}
	}
	if len(abandoned) == 0 {
		return observed, nil
	}
	out := *observed
	out.Containers = make([]*runtime.ContainerStatus, 0, len(observed.Containers)-len(abandoned))
	for _, c := range observed.Containers {
		if !startAbandoned(c) {
			out.Containers = append(out.Containers, c)
		}
	}
	return &out, abandoned
}
