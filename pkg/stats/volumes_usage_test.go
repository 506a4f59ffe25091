package stats

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testclock "k8s.io/utils/clock/testing"
)

// TestVolumeUsageFromTheDriver: a volume whose driver reports its usage is
// shown with those figures and its claim (a generic ephemeral volume's
// too); one whose driver fails is left out.
func TestVolumeUsageFromTheDriver(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}},
		{Name: "broken", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "b"}}},
	}}}
	n := func(v uint64) *uint64 { return &v }
	dirs := []VolumeDir{
		{Name: "scratch", Plugin: "kubernetes.io/csi", Path: "/nonexistent", Usage: func(context.Context) (*statsapi.FsStats, error) {
			return &statsapi.FsStats{CapacityBytes: n(4096), UsedBytes: n(1000), AvailableBytes: n(3096)}, nil
		}},
		{Name: "broken", Plugin: "kubernetes.io/csi", Path: "/nonexistent", Usage: func(context.Context) (*statsapi.FsStats, error) {
			return nil, errors.New("driver gone")
		}},
	}
	got := measureVolumes(context.Background(), pod, dirs, testclock.NewFakeClock(time.Now()), noMetrics{})
	if len(got) != 1 {
		t.Fatalf("volumes = %+v, want the one the driver measured", got)
	}
	s := got[0]
	if s.stats.Name != "scratch" || *s.stats.UsedBytes != 1000 || *s.stats.CapacityBytes != 4096 || s.ephemeral ||
		s.stats.PVCRef == nil || s.stats.PVCRef.Name != "web-scratch" {
		t.Fatalf("volume stats = %+v (pvcRef %+v)", s, s.stats.PVCRef)
	}
}
