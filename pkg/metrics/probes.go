package metrics

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// Probe results as prober_probe_total spells them.
const (
	ProbeSuccessful = "successful"
	ProbeFailed     = "failed"
	ProbeUnknown    = "unknown"
)

// ObserveProbe counts one run of a container's probe (kind Liveness,
// Readiness or Startup) by its result (successful, failed or unknown)
// and, unless it failed, times it, as the kubelet's prober does.
func (m *Metrics) ObserveProbe(kind, result string, pod *v1.Pod, container string, d time.Duration) {
	m.probeTotal.WithLabelValues(kind, result, container, pod.Name, pod.Namespace, string(pod.UID)).Inc()
	if result != ProbeFailed {
		m.probeDuration.WithLabelValues(kind, container, pod.Name, pod.Namespace).Observe(d.Seconds())
	}
}

// ForgetProbe drops the series of a probe that no longer runs.
func (m *Metrics) ForgetProbe(kind string, pod *v1.Pod, container string) {
	for _, r := range []string{ProbeSuccessful, ProbeFailed, ProbeUnknown} {
		m.probeTotal.Delete(map[string]string{"probe_type": kind, "result": r, "container": container,
			"pod": pod.Name, "namespace": pod.Namespace, "pod_uid": string(pod.UID)})
	}
	m.probeDuration.Delete(map[string]string{"probe_type": kind, "container": container, "pod": pod.Name, "namespace": pod.Namespace})
}
