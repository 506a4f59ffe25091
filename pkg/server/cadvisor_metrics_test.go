package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodeagent/nodeagent/pkg/stats"
)

// fakeCgroups returns fixed cgroups, or an error.
type fakeCgroups struct {
	cgroups []stats.CgroupStats
	err     error
}

func (f *fakeCgroups) CgroupStats(context.Context) ([]stats.CgroupStats, error) {
	return f.cgroups, f.err
}

func (f *fakeCgroups) Machine() stats.MachineInfo {
	return stats.MachineInfo{MachineID: "m1", SystemUUID: "uuid-1", BootID: "b1", CPUCores: 4, MemoryBytes: 8 << 30}
}

// testCgroups are the root, the pod web and its container app.
func testCgroups() []stats.CgroupStats {
	at := time.Unix(1_800_000_000, 0)
	return []stats.CgroupStats{
		{Cgroup: "/", StartTime: at.Add(-time.Hour), Time: at, CPUNanoseconds: u(12_500_000_000),
			Memory:      &stats.CgroupMemory{Usage: u(2 << 30), WorkingSet: u(1 << 30), RSS: u(512 << 20)},
			Filesystems: []stats.FsUsage{{Device: "/dev/vda1", Usage: 10 << 30, Limit: 100 << 30}},
			Network:     []stats.InterfaceCounters{{Name: "eth0", RxBytes: 1000, TxBytes: 2000}}},
		{Cgroup: "/kubepods/burstable/podu1", Namespace: "default", Pod: "web", StartTime: at.Add(-time.Minute), Time: at,
			CPUNanoseconds: u(2_000_000_000), Memory: &stats.CgroupMemory{WorkingSet: u(100 << 20), Limit: u(0)},
			CPUSpec: &stats.CPUSpec{Period: 100000, Shares: 102},
			Network: []stats.InterfaceCounters{{Name: "eth0", RxBytes: 10, RxPackets: 1, TxBytes: 20, TxPackets: 2}}},
		{Cgroup: "/kubepods/burstable/podu1/c-app", ContainerID: "c-app", Image: "nginx:1.27", Namespace: "default", Pod: "web", Container: "app",
			StartTime: at.Add(-30 * time.Second), Time: at, CPUNanoseconds: u(1_500_000_000),
			CFS:      &stats.CFSStats{Periods: 100, ThrottledPeriods: 7, ThrottledNanoseconds: 2_500_000_000},
			CPUSpec:  &stats.CPUSpec{Quota: 50000, Period: 100000, Shares: 51},
			Memory:   &stats.CgroupMemory{Usage: u(120 << 20), WorkingSet: u(90 << 20), RSS: u(80 << 20), Cache: u(30 << 20), MaxUsage: u(150 << 20), Limit: u(256 << 20)},
			OOMKills: u(1), Filesystems: []stats.FsUsage{{Device: "/dev/vdb", Usage: 4096, Limit: 50 << 30}},
			DiskIO: []stats.DiskIO{{MajorMinor: "253:16", Device: "/dev/vdb", ReadBytes: 10, WriteBytes: 20}}},
	}
}

func scrapeCadvisor(t *testing.T, src CgroupStatsProvider) map[string]*dto.MetricFamily {
	t.Helper()
	a := testAPI(&fakeRuntime{})
	a.cgroups = src
	rec := httptest.NewRecorder()
	a.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics/cadvisor", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics/cadvisor: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// find returns the series of a family whose labels include want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	fam, ok := fams[name]
	if !ok {
		t.Fatalf("no %s", name)
	}
	for _, m := range fam.GetMetric() {
		got := labelsOf(m)
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
			}
		}
		if match {
			return m
		}
	}
	t.Fatalf("no %s with %v", name, want)
	return nil
}

func TestCadvisorMetrics(t *testing.T) {
	fams := scrapeCadvisor(t, &fakeCgroups{cgroups: testCgroups()})
	app := map[string]string{"container": "app", "pod": "web", "namespace": "default", "id": "/kubepods/burstable/podu1/c-app", "name": "c-app", "image": "nginx:1.27"}
	pod := map[string]string{"container": "", "pod": "web", "namespace": "default", "id": "/kubepods/burstable/podu1", "name": "", "image": ""}
	root := map[string]string{"container": "", "pod": "", "namespace": "", "id": "/", "name": "", "image": ""}
	with := func(base map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for bk, bv := range base {
			out[bk] = bv
		}
		return out
	}
	tests := []struct {
		name   string
		metric string
		labels map[string]string
		typ    dto.MetricType
		value  float64
	}{
		{"container cpu", "container_cpu_usage_seconds_total", with(app, "cpu", "total"), dto.MetricType_COUNTER, 1.5},
		{"pod cpu", "container_cpu_usage_seconds_total", with(pod, "cpu", "total"), dto.MetricType_COUNTER, 2},
		{"root cpu", "container_cpu_usage_seconds_total", with(root, "cpu", "total"), dto.MetricType_COUNTER, 12.5},
		{"cfs periods", "container_cpu_cfs_periods_total", app, dto.MetricType_COUNTER, 100},
		{"cfs throttled periods", "container_cpu_cfs_throttled_periods_total", app, dto.MetricType_COUNTER, 7},
		{"cfs throttled seconds", "container_cpu_cfs_throttled_seconds_total", app, dto.MetricType_COUNTER, 2.5},
		{"working set", "container_memory_working_set_bytes", app, dto.MetricType_GAUGE, 90 << 20},
		{"rss", "container_memory_rss", app, dto.MetricType_GAUGE, 80 << 20},
		{"cache", "container_memory_cache", app, dto.MetricType_GAUGE, 30 << 20},
		{"usage", "container_memory_usage_bytes", app, dto.MetricType_GAUGE, 120 << 20},
		{"max usage", "container_memory_max_usage_bytes", app, dto.MetricType_GAUGE, 150 << 20},
		{"memory limit", "container_spec_memory_limit_bytes", app, dto.MetricType_GAUGE, 256 << 20},
		{"no memory limit", "container_spec_memory_limit_bytes", pod, dto.MetricType_GAUGE, 0},
		{"quota", "container_spec_cpu_quota", app, dto.MetricType_GAUGE, 50000},
		{"period", "container_spec_cpu_period", app, dto.MetricType_GAUGE, 100000},
		{"shares", "container_spec_cpu_shares", app, dto.MetricType_GAUGE, 51},
		{"fs usage", "container_fs_usage_bytes", with(app, "device", "/dev/vdb"), dto.MetricType_GAUGE, 4096},
		{"fs limit", "container_fs_limit_bytes", with(app, "device", "/dev/vdb"), dto.MetricType_GAUGE, 50 << 30},
		{"root fs", "container_fs_usage_bytes", with(root, "device", "/dev/vda1"), dto.MetricType_GAUGE, 10 << 30},
		{"reads", "container_fs_reads_bytes_total", with(app, "device", "/dev/vdb"), dto.MetricType_COUNTER, 10},
		{"writes", "container_fs_writes_bytes_total", with(app, "device", "/dev/vdb"), dto.MetricType_COUNTER, 20},
		{"pod receive", "container_network_receive_bytes_total", with(pod, "interface", "eth0"), dto.MetricType_COUNTER, 10},
		{"pod transmit", "container_network_transmit_bytes_total", with(pod, "interface", "eth0"), dto.MetricType_COUNTER, 20},
		{"pod receive packets", "container_network_receive_packets_total", with(pod, "interface", "eth0"), dto.MetricType_COUNTER, 1},
		{"pod transmit packets", "container_network_transmit_packets_total", with(pod, "interface", "eth0"), dto.MetricType_COUNTER, 2},
		{"pod receive errors", "container_network_receive_errors_total", with(pod, "interface", "eth0"), dto.MetricType_COUNTER, 0},
		{"root receive", "container_network_receive_bytes_total", with(root, "interface", "eth0"), dto.MetricType_COUNTER, 1000},
		{"oom", "container_oom_events_total", app, dto.MetricType_COUNTER, 1},
		{"start time", "container_start_time_seconds", app, dto.MetricType_GAUGE, 1_800_000_000 - 30},
		{"last seen", "container_last_seen", app, dto.MetricType_GAUGE, 1_800_000_000},
		{"cores", "machine_cpu_cores", map[string]string{"machine_id": "m1", "system_uuid": "uuid-1", "boot_id": "b1"}, dto.MetricType_GAUGE, 4},
		{"memory", "machine_memory_bytes", map[string]string{"machine_id": "m1"}, dto.MetricType_GAUGE, 8 << 30},
		{"no scrape error", "container_scrape_error", nil, dto.MetricType_GAUGE, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fams[tt.metric].GetType(); got != tt.typ {
				t.Errorf("%s is a %s, want %s", tt.metric, got, tt.typ)
			}
			m := find(t, fams, tt.metric, tt.labels)
			var v float64
			switch tt.typ {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			default:
				v = m.GetGauge().GetValue()
			}
			if v != tt.value {
				t.Errorf("%s%v = %v, want %v", tt.metric, tt.labels, v, tt.value)
			}
		})
	}
	// Every cgroup series carries the kubelet's six labels.
	for name, fam := range fams {
		if name == "machine_cpu_cores" || name == "machine_memory_bytes" || name == "container_scrape_error" {
			continue
		}
		for _, m := range fam.GetMetric() {
			l := labelsOf(m)
			for _, k := range cadvisorLabels {
				if _, ok := l[k]; !ok {
					t.Errorf("%s%v lacks %q", name, l, k)
				}
			}
		}
	}
	// Without a quota there are no CFS counters and no quota, as in cAdvisor.
	for _, name := range []string{"container_cpu_cfs_periods_total", "container_spec_cpu_quota"} {
		for _, m := range fams[name].GetMetric() {
			if labelsOf(m)["container"] == "" {
				t.Errorf("%s for %v, which has no quota", name, labelsOf(m))
			}
		}
	}
	// Usage carries the time it was read; the spec does not.
	if ts := find(t, fams, "container_memory_working_set_bytes", app).GetTimestampMs(); ts != 1_800_000_000_000 {
		t.Errorf("working set timestamp %d", ts)
	}
	if ts := find(t, fams, "container_spec_cpu_quota", app).GetTimestampMs(); ts != 0 {
		t.Errorf("spec timestamp %d, want none", ts)
	}
	if h := fams["container_cpu_usage_seconds_total"].GetHelp(); h != "Cumulative cpu time consumed in seconds." {
		t.Errorf("help %q", h)
	}
}

func TestCadvisorMetricsScrapeError(t *testing.T) {
	fams := scrapeCadvisor(t, &fakeCgroups{err: errors.New("root cgroup gone")})
	if v := find(t, fams, "container_scrape_error", nil).GetGauge().GetValue(); v != 1 {
		t.Errorf("container_scrape_error = %v, want 1", v)
	}
	if _, ok := fams["machine_cpu_cores"]; !ok {
		t.Error("machine metrics missing when the cgroups cannot be listed")
	}
}

func TestCadvisorMetricsNotServedWithoutSource(t *testing.T) {
	a := testAPI(&fakeRuntime{})
	rec := httptest.NewRecorder()
	a.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics/cadvisor", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /metrics/cadvisor without a source: %d, want 404", rec.Code)
	}
}
