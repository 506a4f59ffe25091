package metrics

import (
	"testing"
	"time"
)

func TestObservePodStep(t *testing.T) {
	m := New()
	m.ObservePodStep("createContainer", 20*time.Millisecond)
	m.ObservePodStep("createContainer", 30*time.Millisecond)
	m.ObservePodStep("pullImage", 3*time.Second)
	fams, _ := scrape(t, m.Handler())
	const name = "nodeagent_pod_start_step_duration_seconds"
	for _, tc := range []struct {
		step  string
		count uint64
		sum   float64
	}{
		{"createContainer", 2, 0.05},
		{"pullImage", 1, 3},
	} {
		h := sample(t, fams, name, "step", tc.step).GetHistogram()
		if h.GetSampleCount() != tc.count || h.GetSampleSum() < tc.sum-1e-9 || h.GetSampleSum() > tc.sum+1e-9 {
			t.Errorf("%s{step=%q}: count %d sum %g, want %d and %g", name, tc.step, h.GetSampleCount(), h.GetSampleSum(), tc.count, tc.sum)
		}
	}
}
