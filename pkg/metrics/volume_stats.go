package metrics

import (
	"time"

	compbase "k8s.io/component-base/metrics"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// VolumeStatsSource gives the pods' volumes as last measured, the figures
// /stats/summary shows; *stats.Provider satisfies it. It must not measure
// anything: it is called at every scrape.
type VolumeStatsSource interface {
	VolumeStats() []statsapi.VolumeStats
}

// volumeStatsLabels are the kubelet's labels of a claim's volume gauges.
var volumeStatsLabels = []string{"namespace", "persistentvolumeclaim"}

// volumeStatsCollector turns the latest volume stats into the kubelet's
// kubelet_volume_stats_* gauges when /metrics is scraped: one series per
// claim, however many pods use it; volumes of no claim have none.
type volumeStatsCollector struct {
	compbase.BaseStableCollector
	src VolumeStatsSource

	capacity, available, used *compbase.Desc
	inodes, inodesFree        *compbase.Desc
	inodesUsed                *compbase.Desc
}

var _ compbase.StableCollector = (*volumeStatsCollector)(nil)

func newVolumeStatsCollector(src VolumeStatsSource) *volumeStatsCollector {
	desc := func(name, help string) *compbase.Desc {
		return compbase.NewDesc(compbase.BuildFQName("", kubeletSubsystem, name), help,
			volumeStatsLabels, nil, compbase.ALPHA, "")
	}
	return &volumeStatsCollector{
		src:        src,
		capacity:   desc("volume_stats_capacity_bytes", "Capacity in bytes of the volume"),
		available:  desc("volume_stats_available_bytes", "Number of available bytes in the volume"),
		used:       desc("volume_stats_used_bytes", "Number of used bytes in the volume"),
		inodes:     desc("volume_stats_inodes", "Maximum number of inodes in the volume"),
		inodesFree: desc("volume_stats_inodes_free", "Number of free inodes in the volume"),
		inodesUsed: desc("volume_stats_inodes_used", "Number of used inodes in the volume"),
	}
}

// DescribeWithStability implements compbase.StableCollector.
func (c *volumeStatsCollector) DescribeWithStability(ch chan<- *compbase.Desc) {
	for _, d := range []*compbase.Desc{c.capacity, c.available, c.used, c.inodes, c.inodesFree, c.inodesUsed} {
		ch <- d
	}
}

// CollectWithStability implements compbase.StableCollector. A claim used
// by several pods is one volume: the first pod's figures stand for it. A
// figure the measurement lacks is left out rather than shown as zero.
func (c *volumeStatsCollector) CollectWithStability(ch chan<- compbase.Metric) {
	seen := map[statsapi.PVCReference]bool{}
	for _, v := range c.src.VolumeStats() {
		if v.PVCRef == nil || seen[*v.PVCRef] {
			continue
		}
		seen[*v.PVCRef] = true
		for _, g := range []struct {
			desc  *compbase.Desc
			value *uint64
		}{
			{c.capacity, v.CapacityBytes}, {c.available, v.AvailableBytes}, {c.used, v.UsedBytes},
			{c.inodes, v.Inodes}, {c.inodesFree, v.InodesFree}, {c.inodesUsed, v.InodesUsed},
		} {
			if g.value == nil {
				continue
			}
			if m := compbase.NewLazyConstMetric(g.desc, compbase.GaugeValue, float64(*g.value), v.PVCRef.Namespace, v.PVCRef.Name); m != nil {
				ch <- m
			}
		}
	}
}

// ServeVolumeStats adds the kubelet's volume gauges (kubelet_volume_stats_*,
// by namespace and persistentvolumeclaim) to /metrics, computed at each
// scrape from what src last measured. The stats provider is made after
// the metrics, so the composition root calls this once it has one; a
// second call fails.
func (m *Metrics) ServeVolumeStats(src VolumeStatsSource) error {
	return m.registry.CustomRegister(newVolumeStatsCollector(src))
}

// VolumeMetricSourceDu is the metric_source of a volume measured by a walk
// of its directory, as the kubelet's du; a CSI driver's measurement is
// labelled with the driver's name.
const VolumeMetricSourceDu = "du"

// ObserveVolumeMetricCollection records how long measuring one volume's
// usage took, by where the figures came from (VolumeMetricSourceDu for a
// walk of its directory, a CSI driver's name for NodeGetVolumeStats), as
// kubelet_volume_metric_collection_duration_seconds{metric_source}.
func (m *Metrics) ObserveVolumeMetricCollection(source string, d time.Duration) {
	m.volumeMetricCollection.WithLabelValues(source).Observe(d.Seconds())
}
