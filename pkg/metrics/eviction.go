package metrics

import "time"

// ObserveEviction counts a pod the eviction manager evicted, under the
// signal it was evicted for, as kubelet_evictions{eviction_signal}: a
// threshold's signal (memory.available, nodefs.available, ...) or a local
// storage limit's pseudo-signal (emptydirfs.limit, ephemeralpodfs.limit,
// ephemeralcontainerfs.limit).
func (m *Metrics) ObserveEviction(signal string) {
	m.evictions.WithLabelValues(signal).Inc()
}

// ObserveEvictionStatsAge records how old the measurement of signal was
// when the eviction manager evicted on it, as
// kubelet_eviction_stats_age_seconds{eviction_signal}.
func (m *Metrics) ObserveEvictionStatsAge(signal string, age time.Duration) {
	m.evictionStatsAge.WithLabelValues(signal).Observe(age.Seconds())
}
