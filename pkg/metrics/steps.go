package metrics

import (
	"time"

	compbase "k8s.io/component-base/metrics"
)

// newPodStepDuration is the histogram of the steps of pods' lives as the
// agent takes them, labelled by the step's kind (createContainer, not
// createContainer:app), so that its series stay few.
func newPodStepDuration() *compbase.HistogramVec {
	return compbase.NewHistogramVec(&compbase.HistogramOpts{
		Namespace: "nodeagent", Name: "pod_start_step_duration_seconds",
		Help: "Duration in seconds of each step the agent takes for a pod, broken down by step: admit, podCgroup, volumes, " +
			"pullImage, sandbox, createContainer, startContainer, postStart, and the termination steps (preStop, stopContainer, stopSandbox, " +
			"finalStatus, removeContainer, removeSandbox, removePodCgroup, unmountVolumes, confirmDeletion). " +
			"Failed steps count; images found present do not.",
		Buckets: compbase.ExponentialBuckets(.005, 2.5, 14), StabilityLevel: compbase.ALPHA,
	}, []string{"step"})
}

// ObservePodStep records one finished step of a pod (pkg/timeline) by
// its kind.
func (m *Metrics) ObservePodStep(kind string, d time.Duration) {
	m.podStepDuration.WithLabelValues(kind).Observe(d.Seconds())
}
