package metrics

import "strconv"

// ObserveContainerTerminated counts a container that the agent saw
// terminate, by its type (container, init_container or
// ephemeral_container), exit code and reason, as
// kubelet_terminated_containers_total.
func (m *Metrics) ObserveContainerTerminated(containerType string, exitCode int32, reason string) {
	m.terminatedContainers.WithLabelValues(containerType, strconv.Itoa(int(exitCode)), reason).Inc()
}
