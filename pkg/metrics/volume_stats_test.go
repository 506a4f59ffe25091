package metrics

import (
	"math"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// fakeVolumeStats hands out the volumes of a summary's pods and counts
// how often it is asked.
type fakeVolumeStats struct {
	summary statsapi.Summary
	calls   int
}

func (f *fakeVolumeStats) VolumeStats() []statsapi.VolumeStats {
	f.calls++
	var out []statsapi.VolumeStats
	for _, p := range f.summary.Pods {
		out = append(out, p.VolumeStats...)
	}
	return out
}

func volume(name string, claim *statsapi.PVCReference, capacity, available, used, inodes, inodesFree, inodesUsed uint64) statsapi.VolumeStats {
	return statsapi.VolumeStats{Name: name, PVCRef: claim, FsStats: statsapi.FsStats{
		CapacityBytes: &capacity, AvailableBytes: &available, UsedBytes: &used,
		Inodes: &inodes, InodesFree: &inodesFree, InodesUsed: &inodesUsed,
	}}
}

// TestVolumeStatsGauges: two pods of one claim give one series per gauge,
// with the first pod's figures; an emptyDir gives none; a generic
// ephemeral volume's claim (<pod>-<volume>) gives its own; a figure the
// measurement lacks is left out. The gauges are computed at each scrape
// from the source, as the kubelet's, with its names, help and labels.
func TestVolumeStatsGauges(t *testing.T) {
	shared := &statsapi.PVCReference{Name: "data", Namespace: "db"}
	scratch := volume("scratch", &statsapi.PVCReference{Name: "web-scratch", Namespace: "web"}, 2000, 1500, 500, 0, 0, 0)
	scratch.Inodes, scratch.InodesFree, scratch.InodesUsed = nil, nil, nil // a block volume's driver reports bytes only
	src := &fakeVolumeStats{summary: statsapi.Summary{Pods: []statsapi.PodStats{
		{PodRef: statsapi.PodReference{Name: "db-0", Namespace: "db"}, VolumeStats: []statsapi.VolumeStats{
			volume("data", shared, 1000, 600, 400, 100, 70, 30),
			volume("tmp", nil, 9000, 8000, 1000, 900, 800, 100),
		}},
		{PodRef: statsapi.PodReference{Name: "db-1", Namespace: "db"}, VolumeStats: []statsapi.VolumeStats{
			volume("data", shared, 1000, 590, 410, 100, 69, 31),
		}},
		{PodRef: statsapi.PodReference{Name: "web", Namespace: "web"}, VolumeStats: []statsapi.VolumeStats{scratch}},
	}}}
	m := New()
	if err := m.ServeVolumeStats(src); err != nil {
		t.Fatal(err)
	}
	if src.calls != 0 {
		t.Errorf("the source was asked %d times before any scrape", src.calls)
	}
	want := `
# HELP kubelet_volume_stats_available_bytes [ALPHA] Number of available bytes in the volume
# TYPE kubelet_volume_stats_available_bytes gauge
kubelet_volume_stats_available_bytes{namespace="db",persistentvolumeclaim="data"} 600
kubelet_volume_stats_available_bytes{namespace="web",persistentvolumeclaim="web-scratch"} 1500
# HELP kubelet_volume_stats_capacity_bytes [ALPHA] Capacity in bytes of the volume
# TYPE kubelet_volume_stats_capacity_bytes gauge
kubelet_volume_stats_capacity_bytes{namespace="db",persistentvolumeclaim="data"} 1000
kubelet_volume_stats_capacity_bytes{namespace="web",persistentvolumeclaim="web-scratch"} 2000
# HELP kubelet_volume_stats_inodes [ALPHA] Maximum number of inodes in the volume
# TYPE kubelet_volume_stats_inodes gauge
kubelet_volume_stats_inodes{namespace="db",persistentvolumeclaim="data"} 100
# HELP kubelet_volume_stats_inodes_free [ALPHA] Number of free inodes in the volume
# TYPE kubelet_volume_stats_inodes_free gauge
kubelet_volume_stats_inodes_free{namespace="db",persistentvolumeclaim="data"} 70
# HELP kubelet_volume_stats_inodes_used [ALPHA] Number of used inodes in the volume
# TYPE kubelet_volume_stats_inodes_used gauge
kubelet_volume_stats_inodes_used{namespace="db",persistentvolumeclaim="data"} 30
# HELP kubelet_volume_stats_used_bytes [ALPHA] Number of used bytes in the volume
# TYPE kubelet_volume_stats_used_bytes gauge
kubelet_volume_stats_used_bytes{namespace="db",persistentvolumeclaim="data"} 400
kubelet_volume_stats_used_bytes{namespace="web",persistentvolumeclaim="web-scratch"} 500
`
	names := []string{
		"kubelet_volume_stats_capacity_bytes", "kubelet_volume_stats_available_bytes", "kubelet_volume_stats_used_bytes",
		"kubelet_volume_stats_inodes", "kubelet_volume_stats_inodes_free", "kubelet_volume_stats_inodes_used",
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}

	// The next scrape shows the source's figures of then.
	src.summary.Pods = src.summary.Pods[2:]
	before := src.calls
	fams, text := scrape(t, m.Handler())
	if src.calls != before+1 {
		t.Errorf("one scrape asked the source %d times", src.calls-before)
	}
	if strings.Contains(text, `persistentvolumeclaim="data"`) {
		t.Errorf("the claim no pod uses any more is still shown:\n%s", text)
	}
	if v := sample(t, fams, "kubelet_volume_stats_capacity_bytes", "namespace", "web", "persistentvolumeclaim", "web-scratch").GetGauge().GetValue(); v != 2000 {
		t.Errorf("capacity of web-scratch = %v, want 2000", v)
	}

	if err := m.ServeVolumeStats(src); err == nil {
		t.Error("a second ServeVolumeStats was accepted")
	}
}

func TestVolumeMetricCollectionDuration(t *testing.T) {
	m := New()
	m.ObserveVolumeMetricCollection(VolumeMetricSourceDu, 30*time.Millisecond)
	m.ObserveVolumeMetricCollection(VolumeMetricSourceDu, 2*time.Second)
	m.ObserveVolumeMetricCollection("hostpath.csi.k8s.io", time.Millisecond)
	fams, text := scrape(t, m.Handler())
	if !strings.Contains(text, "# HELP kubelet_volume_metric_collection_duration_seconds [ALPHA] Duration in seconds to calculate volume stats\n") ||
		!strings.Contains(text, "# TYPE kubelet_volume_metric_collection_duration_seconds histogram\n") {
		t.Errorf("help or type of kubelet_volume_metric_collection_duration_seconds:\n%s", text)
	}
	h := sample(t, fams, "kubelet_volume_metric_collection_duration_seconds", "metric_source", "du").GetHistogram()
	if h.GetSampleCount() != 2 || math.Abs(h.GetSampleSum()-2.03) > 1e-9 {
		t.Errorf("du: %d samples, sum %v; want 2, 2.03", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := sample(t, fams, "kubelet_volume_metric_collection_duration_seconds", "metric_source", "hostpath.csi.k8s.io").GetHistogram(); h.GetSampleCount() != 1 {
		t.Errorf("the driver's: %d samples, want 1", h.GetSampleCount())
	}
}
