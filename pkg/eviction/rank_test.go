package eviction

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// pod builds a pod of one container "c" with the given memory and
// ephemeral-storage requests ("" for none) and priority.
func pod(name string, memReq, diskReq string, priority int32) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{Priority: &priority, Containers: []v1.Container{{Name: "c"}}},
	}
	req := v1.ResourceList{}
	if memReq != "" {
		req[v1.ResourceMemory] = resource.MustParse(memReq)
	}
	if diskReq != "" {
		req[v1.ResourceEphemeralStorage] = resource.MustParse(diskReq)
	}
	if len(req) > 0 {
		p.Spec.Containers[0].Resources.Requests = req
	}
	return p
}

func names(pods []*v1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return strings.Join(out, " ")
}

func TestRankMemory(t *testing.T) {
	// over: uses more than it requests; under: less.
	overLow := pod("over-low", "100Mi", "", 0)
	overHigh := pod("over-high", "100Mi", "", 1000)
	underLow := pod("under-low", "500Mi", "", 0)
	bestEffortBig := pod("be-big", "", "", 0)
	bestEffortSmall := pod("be-small", "", "", 0)
	noStats := pod("no-stats", "1Gi", "", 5000)
	usage := usageOf([]statsapi.PodStats{
		podStats(overLow, 200*mi), podStats(overHigh, 900*mi), podStats(underLow, 400*mi),
		podStats(bestEffortBig, 300*mi), podStats(bestEffortSmall, 10*mi),
	})
	pods := []*v1.Pod{underLow, overHigh, bestEffortSmall, overLow, noStats, bestEffortBig}
	rankMemory(pods, usage)
	// No stats first; then exceeding requests (by priority, then by use
	// above request); then the rest.
	if got, want := names(pods), "no-stats be-big over-low be-small over-high under-low"; got != want {
		t.Errorf("order = %s, want %s", got, want)
	}
}

func TestRankDisk(t *testing.T) {
	a := pod("a", "", "1Gi", 0)  // uses 600Mi: under its request
	b := pod("b", "", "", 0)     // uses 100Mi: over (no request)
	c := pod("c", "", "", 0)     // uses 300Mi: over
	d := pod("d", "", "", 10)    // uses 900Mi: over, higher priority
	e := pod("e", "", "10Mi", 0) // logs only when layers are on the image fs
	e.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	withVolume := podStats(e, 0, ctrStats("c", 0, 50*mi, 10*mi))
	withVolume.VolumeStats = []statsapi.VolumeStats{{Name: "scratch", FsStats: statsapi.FsStats{UsedBytes: u64(400 * mi)}}}
	usage := usageOf([]statsapi.PodStats{
		podStats(a, 0, ctrStats("c", 0, 500*mi, 100*mi)),
		podStats(b, 0, ctrStats("c", 0, 90*mi, 10*mi)),
		podStats(c, 0, ctrStats("c", 0, 290*mi, 10*mi)),
		podStats(d, 0, ctrStats("c", 0, 890*mi, 10*mi)),
		withVolume,
	})
	tests := []struct {
		name   string
		layout DiskLayout
		signal Signal
		want   string
	}{
		{name: "one filesystem: everything counts", signal: SignalNodeFsAvailable, want: "e c b d a"},
		{name: "dedicated imagefs, nodefs: logs and volumes", layout: DiskLayout{DedicatedImageFs: true}, signal: SignalNodeFsAvailable, want: "e b c d a"},
		{name: "dedicated imagefs, imagefs: writable layers", layout: DiskLayout{DedicatedImageFs: true}, signal: SignalImageFsAvailable, want: "c b e d a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := []*v1.Pod{a, b, c, d, e}
			rankers(tt.layout)[tt.signal](pods, usage)
			if got := names(pods); got != tt.want {
				t.Errorf("order = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestRankPIDs(t *testing.T) {
	a, b, c := pod("a", "", "", 0), pod("b", "", "", 0), pod("c", "", "", -1)
	procs := func(p *v1.Pod, n uint64) statsapi.PodStats {
		s := podStats(p, 0)
		s.ProcessStats = &statsapi.ProcessStats{ProcessCount: &n}
		return s
	}
	pods := []*v1.Pod{a, b, c}
	rankPIDs(pods, usageOf([]statsapi.PodStats{procs(a, 5), procs(b, 50), procs(c, 1)}))
	if got, want := names(pods), "c b a"; got != want {
		t.Errorf("order = %s, want %s", got, want)
	}
}
