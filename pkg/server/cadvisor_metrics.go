package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/stats"
)

// CgroupStatsProvider lists the cgroups /metrics/cadvisor shows and
// describes the machine; *stats.Provider is one.
type CgroupStatsProvider interface {
	CgroupStats(ctx context.Context) ([]stats.CgroupStats, error)
	Machine() stats.MachineInfo
}

var _ CgroupStatsProvider = (*stats.Provider)(nil)

// cadvisorLabels are the labels the kubelet puts on every cAdvisor series:
// the cgroup (id), the runtime's container ID (name), the image, and the
// pod and container the cgroup belongs to ("" where it belongs to none).
var cadvisorLabels = []string{"container", "id", "image", "name", "namespace", "pod"}

func cadvisorLabelValues(s *stats.CgroupStats) []string {
	return []string{s.Container, s.Cgroup, s.Image, s.ContainerID, s.Namespace, s.Pod}
}

// sample is one value of a cgroup metric, with the values of its extra
// labels (cpu, device, interface).
type sample struct {
	value  float64
	labels []string
}

// cgroupMetric is one cAdvisor metric family: its name, help and type as
// cAdvisor has them, and how a cgroup's stats give its samples. Spec
// metrics carry no timestamp, as in cAdvisor; usage metrics carry the
// time they were read.
type cgroupMetric struct {
	desc      *prometheus.Desc
	valueType prometheus.ValueType
	spec      bool
	values    func(s *stats.CgroupStats) []sample
}

func newCgroupMetric(name, help string, vt prometheus.ValueType, extra []string, values func(*stats.CgroupStats) []sample) cgroupMetric {
	return cgroupMetric{desc: prometheus.NewDesc(name, help, append(append([]string{}, cadvisorLabels...), extra...), nil), valueType: vt, values: values}
}

func specMetric(name, help string, values func(*stats.CgroupStats) []sample) cgroupMetric {
	m := newCgroupMetric(name, help, prometheus.GaugeValue, nil, values)
	m.spec = true
	return m
}

func one(v float64) []sample { return []sample{{value: v}} }

func optional(v *uint64) []sample {
	if v == nil {
		return nil
	}
	return one(float64(*v))
}

func memoryValue(get func(*stats.CgroupMemory) *uint64) func(*stats.CgroupStats) []sample {
	return func(s *stats.CgroupStats) []sample {
		if s.Memory == nil {
			return nil
		}
		return optional(get(s.Memory))
	}
}

// cfsValue gives a CFS counter only for cgroups with a quota, as cAdvisor.
func cfsValue(get func(*stats.CFSStats) float64) func(*stats.CgroupStats) []sample {
	return func(s *stats.CgroupStats) []sample {
		if s.CFS == nil || s.CPUSpec == nil || s.CPUSpec.Quota == 0 {
			return nil
		}
		return one(get(s.CFS))
	}
}

func fsValue(get func(*stats.FsUsage) uint64) func(*stats.CgroupStats) []sample {
	return func(s *stats.CgroupStats) []sample {
		out := make([]sample, 0, len(s.Filesystems))
		for i := range s.Filesystems {
			out = append(out, sample{value: float64(get(&s.Filesystems[i])), labels: []string{s.Filesystems[i].Device}})
		}
		return out
	}
}

func ioValue(get func(*stats.DiskIO) uint64) func(*stats.CgroupStats) []sample {
	return func(s *stats.CgroupStats) []sample {
		out := make([]sample, 0, len(s.DiskIO))
		for i := range s.DiskIO {
			out = append(out, sample{value: float64(get(&s.DiskIO[i])), labels: []string{s.DiskIO[i].Device}})
		}
		return out
	}
}

func netValue(get func(*stats.InterfaceCounters) uint64) func(*stats.CgroupStats) []sample {
	return func(s *stats.CgroupStats) []sample {
		out := make([]sample, 0, len(s.Network))
		for i := range s.Network {
			out = append(out, sample{value: float64(get(&s.Network[i])), labels: []string{s.Network[i].Name}})
		}
		return out
	}
}

// cgroupMetrics are the cAdvisor metrics served, in the set the kubelet
// enables (CPU, memory, disk usage and I/O, network, OOM), with the names,
// help texts and extra labels of cAdvisor's Prometheus collector.
var cgroupMetrics = []cgroupMetric{
	specMetric("container_creation_time_seconds", "Container creation time since unix epoch in seconds.", func(s *stats.CgroupStats) []sample {
		return one(float64(s.StartTime.Unix()))
	}),
	specMetric("container_start_time_seconds", "Start time of the container since unix epoch in seconds.", func(s *stats.CgroupStats) []sample {
		return one(float64(s.StartTime.Unix()))
	}),
	specMetric("container_spec_cpu_period", "CPU period of the container.", func(s *stats.CgroupStats) []sample {
		if s.CPUSpec == nil {
			return nil
		}
		return one(float64(s.CPUSpec.Period))
	}),
	specMetric("container_spec_cpu_quota", "CPU quota of the container.", func(s *stats.CgroupStats) []sample {
		if s.CPUSpec == nil || s.CPUSpec.Quota == 0 {
			return nil
		}
		return one(float64(s.CPUSpec.Quota))
	}),
	specMetric("container_spec_cpu_shares", "CPU share of the container.", func(s *stats.CgroupStats) []sample {
		if s.CPUSpec == nil {
			return nil
		}
		return one(float64(s.CPUSpec.Shares))
	}),
	specMetric("container_spec_memory_limit_bytes", "Memory limit for the container.", memoryValue(func(m *stats.CgroupMemory) *uint64 { return m.Limit })),
	newCgroupMetric("container_last_seen", "Last time a container was seen by the exporter", prometheus.GaugeValue, nil, func(s *stats.CgroupStats) []sample {
		return one(float64(s.Time.Unix()))
	}),
	newCgroupMetric("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", prometheus.CounterValue, []string{"cpu"}, func(s *stats.CgroupStats) []sample {
		if s.CPUNanoseconds == nil {
			return nil
		}
		return []sample{{value: float64(*s.CPUNanoseconds) / float64(time.Second), labels: []string{"total"}}}
	}),
	newCgroupMetric("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", prometheus.CounterValue, nil,
		cfsValue(func(c *stats.CFSStats) float64 { return float64(c.Periods) })),
	newCgroupMetric("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", prometheus.CounterValue, nil,
		cfsValue(func(c *stats.CFSStats) float64 { return float64(c.ThrottledPeriods) })),
	newCgroupMetric("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", prometheus.CounterValue, nil,
		cfsValue(func(c *stats.CFSStats) float64 { return float64(c.ThrottledNanoseconds) / float64(time.Second) })),
	newCgroupMetric("container_memory_cache", "Number of bytes of page cache memory.", prometheus.GaugeValue, nil,
		memoryValue(func(m *stats.CgroupMemory) *uint64 { return m.Cache })),
	newCgroupMetric("container_memory_rss", "Size of RSS in bytes.", prometheus.GaugeValue, nil,
		memoryValue(func(m *stats.CgroupMemory) *uint64 { return m.RSS })),
	newCgroupMetric("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed", prometheus.GaugeValue, nil,
		memoryValue(func(m *stats.CgroupMemory) *uint64 { return m.Usage })),
	newCgroupMetric("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes", prometheus.GaugeValue, nil,
		memoryValue(func(m *stats.CgroupMemory) *uint64 { return m.MaxUsage })),
	newCgroupMetric("container_memory_working_set_bytes", "Current working set in bytes.", prometheus.GaugeValue, nil,
		memoryValue(func(m *stats.CgroupMemory) *uint64 { return m.WorkingSet })),
	newCgroupMetric("container_fs_inodes_free", "Number of available Inodes", prometheus.GaugeValue, []string{"device"},
		fsValue(func(f *stats.FsUsage) uint64 { return f.InodesFree })),
	newCgroupMetric("container_fs_inodes_total", "Number of Inodes", prometheus.GaugeValue, []string{"device"},
		fsValue(func(f *stats.FsUsage) uint64 { return f.Inodes })),
	newCgroupMetric("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", prometheus.GaugeValue, []string{"device"},
		fsValue(func(f *stats.FsUsage) uint64 { return f.Limit })),
	newCgroupMetric("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", prometheus.GaugeValue, []string{"device"},
		fsValue(func(f *stats.FsUsage) uint64 { return f.Usage })),
	newCgroupMetric("container_fs_reads_bytes_total", "Cumulative count of bytes read", prometheus.CounterValue, []string{"device"},
		ioValue(func(d *stats.DiskIO) uint64 { return d.ReadBytes })),
	newCgroupMetric("container_fs_writes_bytes_total", "Cumulative count of bytes written", prometheus.CounterValue, []string{"device"},
		ioValue(func(d *stats.DiskIO) uint64 { return d.WriteBytes })),
	newCgroupMetric("container_network_receive_bytes_total", "Cumulative count of bytes received", prometheus.CounterValue, []string{"interface"},
		netValue(func(n *stats.InterfaceCounters) uint64 { return n.RxBytes })),
	newCgroupMetric("container_network_receive_packets_total", "Cumulative count of packets received", prometheus.CounterValue, []string{"interface"},
		netValue(func(n *stats.InterfaceCounters) uint64 { return n.RxPackets })),
	newCgroupMetric("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving", prometheus.CounterValue, []string{"interface"},
		netValue(func(n *stats.InterfaceCounters) uint64 { return n.RxDropped })),
	newCgroupMetric("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", prometheus.CounterValue, []string{"interface"},
		netValue(func(n *stats.InterfaceCounters) uint64 { return n.RxErrors })),
	newCgroupMetric("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", prometheus.CounterValue, []string{"interface"},
		netValue(func(n *stats.InterfaceCounters) uint64 { return n.TxBytes })),
	newCgroupMetric("container_network_transmit_packets_total", "Cumulative count of packets transmitted", prometheus.CounterValue, []string{"interface"},
		netValue(func(n *stats.InterfaceCounters) uint64 { return n.TxPackets })),
	newCgroupMetric("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting", prometheus.CounterValue, []string{"interface"},
		netValue(func(n *stats.InterfaceCounters) uint64 { return n.TxDropped })),
	newCgroupMetric("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", prometheus.CounterValue, []string{"interface"},
		netValue(func(n *stats.InterfaceCounters) uint64 { return n.TxErrors })),
	newCgroupMetric("container_oom_events_total", "Count of out of memory events observed for the container", prometheus.CounterValue, nil,
		func(s *stats.CgroupStats) []sample { return optional(s.OOMKills) }),
}

// The machine metrics and the scrape error, as cAdvisor names them.
var (
	machineLabels          = []string{"machine_id", "system_uuid", "boot_id"}
	machineCPUCoresDesc    = prometheus.NewDesc("machine_cpu_cores", "Number of logical CPU cores.", machineLabels, nil)
	machineMemoryDesc      = prometheus.NewDesc("machine_memory_bytes", "Amount of memory installed on the machine.", machineLabels, nil)
	containerScrapeErrDesc = prometheus.NewDesc("container_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// cadvisorCollector turns one listing of the cgroups into cAdvisor's
// metrics. It is made per request, so that the listing runs under the
// request's context.
type cadvisorCollector struct {
	ctx    context.Context
	source CgroupStatsProvider
}

func (c *cadvisorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range cgroupMetrics {
		ch <- m.desc
	}
	ch <- machineCPUCoresDesc
	ch <- machineMemoryDesc
	ch <- containerScrapeErrDesc
}

func (c *cadvisorCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.source.Machine()
	ml := []string{m.MachineID, m.SystemUUID, m.BootID}
	ch <- prometheus.MustNewConstMetric(machineCPUCoresDesc, prometheus.GaugeValue, float64(m.CPUCores), ml...)
	ch <- prometheus.MustNewConstMetric(machineMemoryDesc, prometheus.GaugeValue, float64(m.MemoryBytes), ml...)

	failed := 0.0
	defer func() { ch <- prometheus.MustNewConstMetric(containerScrapeErrDesc, prometheus.GaugeValue, failed) }()
	cgroups, err := c.source.CgroupStats(c.ctx)
	if err != nil {
		failed = 1
		klog.FromContext(c.ctx).Error(err, "Listing cgroups for cAdvisor metrics failed")
		return
	}
	for i := range cgroups {
		s := &cgroups[i]
		base := cadvisorLabelValues(s)
		for _, cm := range cgroupMetrics {
			for _, v := range cm.values(s) {
				metric := prometheus.MustNewConstMetric(cm.desc, cm.valueType, v.value, append(append([]string{}, base...), v.labels...)...)
				if !cm.spec && !s.Time.IsZero() {
					metric = prometheus.NewMetricWithTimestamp(s.Time, metric)
				}
				ch <- metric
			}
		}
	}
}

// getCadvisorMetrics answers /metrics/cadvisor in the Prometheus formats.
func (a *api) getCadvisorMetrics(w http.ResponseWriter, r *http.Request) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(&cadvisorCollector{ctx: r.Context(), source: a.cgroups}); err != nil {
		writeError(w, r, err)
		return
	}
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}
