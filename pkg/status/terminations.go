package status

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// Metrics is told what the statuses handed to the Manager show
// (*metrics.Metrics is one).
type Metrics interface {
	// ObserveContainerTerminated counts a container a status shows
	// terminated where the status before it did not. containerType is
	// one of the ContainerType constants.
	ObserveContainerTerminated(containerType string, exitCode int32, reason string)
}

type noMetrics struct{}

func (noMetrics) ObserveContainerTerminated(string, int32, string) {}

// The container types kubelet_terminated_containers_total is broken down
// by, as the kubelet labels them.
const (
	ContainerTypeContainer = "container"
	ContainerTypeInit      = "init_container"
	ContainerTypeEphemeral = "ephemeral_container"
)

// termination is a container newly shown terminated.
type termination struct {
	containerType string
	exitCode      int32
	reason        string
}

// terminations lists the containers st shows terminated that old, the
// status before it, does not (missing from it, or in another state), as
// the kubelet counts them: once per transition into the terminated state,
// so a container that restarts and ends again counts again. A container
// that ended before notBefore is not counted: when old is not known (a
// static pod's file says nothing of its past), whoever ran the pod then
// saw it end.
func terminations(old, st v1.PodStatus, notBefore time.Time) []termination {
	var out []termination
	add := func(olds, news []v1.ContainerStatus, containerType string) {
		for _, cs := range news {
			t := cs.State.Terminated
			if t == nil || (!notBefore.IsZero() && !t.FinishedAt.IsZero() && t.FinishedAt.Time.Before(notBefore)) {
				continue
			}
			if prev := statusNamed(olds, cs.Name); prev != nil && prev.State.Terminated != nil {
				continue
			}
			out = append(out, termination{containerType: containerType, exitCode: t.ExitCode, reason: t.Reason})
		}
	}
	add(old.InitContainerStatuses, st.InitContainerStatuses, ContainerTypeInit)
	add(old.ContainerStatuses, st.ContainerStatuses, ContainerTypeContainer)
	add(old.EphemeralContainerStatuses, st.EphemeralContainerStatuses, ContainerTypeEphemeral)
	return out
}

func statusNamed(statuses []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}
