package stats

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	fakeclock "k8s.io/utils/clock/testing"
)

// fakeMetrics records the sources of the volume measurements observed.
type fakeMetrics struct{ sources []string }

func (f *fakeMetrics) ObserveVolumeMetricCollection(source string, _ time.Duration) {
	f.sources = append(f.sources, source)
}

// TestVolumeStatsAsLastMeasured: VolumeStats hands out what the last
// refresh measured, pods in UID order and each pod's volumes by name,
// without asking a driver again however often it is called; a walk is
// timed as "du", a driver's measurement is not (no driver name to label it).
func TestVolumeStatsAsLastMeasured(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cache", "f"), "hello")
	claim := func(name string) v1.VolumeSource {
		return v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}
	}
	pods := []*v1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "u2"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
			{Name: "data", VolumeSource: claim("shared")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
			{Name: "data", VolumeSource: claim("shared")},
			{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}}},
	}
	calls := 0
	capacity := uint64(4096)
	usage := func(context.Context) (*statsapi.FsStats, error) {
		calls++
		return &statsapi.FsStats{CapacityBytes: &capacity}, nil
	}
	dirs := func(pod *v1.Pod) []VolumeDir {
		out := []VolumeDir{{Name: "data", Plugin: "kubernetes.io/csi", Path: "/nonexistent", Usage: usage}}
		if pod.Name == "a" {
			out = append(out, VolumeDir{Name: "cache", Plugin: "kubernetes.io/empty-dir", Path: filepath.Join(dir, "cache")})
		}
		return out
	}
	p := &Provider{volumes: newVolumeCache()}
	rec := &fakeMetrics{}
	p.volumes.refresh(context.Background(), pods, dirs, time.Minute, fakeclock.NewFakeClock(time.Now()), rec)

	for range 3 {
		got := p.VolumeStats()
		var names []string
		for _, v := range got {
			name := v.Name
			if v.PVCRef != nil {
				name += "=" + v.PVCRef.Namespace + "/" + v.PVCRef.Name
			}
			names = append(names, name)
		}
		if want := []string{"cache", "data=ns/shared", "data=ns/shared"}; !slices.Equal(names, want) {
			t.Fatalf("volume stats = %v, want %v (u1's, then u2's)", names, want)
		}
		if *got[1].CapacityBytes != capacity || *got[0].UsedBytes == 0 {
			t.Errorf("figures %+v, %+v; want the driver's and the walk's", got[1].FsStats, got[0].FsStats)
		}
	}
	if calls != 2 {
		t.Errorf("the driver was asked %d times, want once per pod by the refresh only", calls)
	}
	if !slices.Equal(rec.sources, []string{"du"}) {
		t.Errorf("measurements observed from %v, want the one walk as du", rec.sources)
	}
}
