package metrics

import (
	"testing"
	"time"
)

func TestEvictionsBySignal(t *testing.T) {
	m := New()
	m.ObserveEviction("memory.available")
	m.ObserveEviction("memory.available")
	m.ObserveEviction("emptydirfs.limit")
	m.ObserveEvictionStatsAge("memory.available", 1500*time.Millisecond)
	fams, _ := scrape(t, m.Handler())
	for signal, want := range map[string]float64{"memory.available": 2, "emptydirfs.limit": 1} {
		if got := sample(t, fams, "kubelet_evictions", "eviction_signal", signal).GetCounter().GetValue(); got != want {
			t.Errorf("kubelet_evictions{eviction_signal=%q} = %v, want %v", signal, got, want)
		}
	}
	h := sample(t, fams, "kubelet_eviction_stats_age_seconds", "eviction_signal", "memory.available").GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 1.5 {
		t.Errorf("kubelet_eviction_stats_age_seconds = %d samples, sum %v; want 1, 1.5", h.GetSampleCount(), h.GetSampleSum())
	}
}
