package stats

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	agentmetrics "github.com/nodeagent/nodeagent/pkg/metrics"
)

// ephemeralPlugins are the volume plugins whose contents live and die
// with the pod: they count as its ephemeral storage.
var ephemeralPlugins = map[string]bool{
	"kubernetes.io/empty-dir":    true,
	"kubernetes.io/configmap":    true,
	"kubernetes.io/secret":       true,
	"kubernetes.io/downward-api": true,
	"kubernetes.io/projected":    true,
}

type volumeStat struct {
	stats     statsapi.VolumeStats
	ephemeral bool
}

type podVolumes struct {
	measured time.Time
	vols     []volumeStat
}

// volumeCache holds the last measurement of every pod's volumes: walking
// a volume costs too much to do on every request, so the housekeeping
// loop does it once per period.
type volumeCache struct {
	mu    sync.Mutex
	byPod map[types.UID]podVolumes
}

func newVolumeCache() *volumeCache {
	return &volumeCache{byPod: map[types.UID]podVolumes{}}
}

func (c *volumeCache) get(uid types.UID) []volumeStat {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byPod[uid].vols
}

// all is every pod's volumes as last measured, pods in UID order.
func (c *volumeCache) all() []statsapi.VolumeStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	uids := make([]types.UID, 0, len(c.byPod))
	for uid := range c.byPod {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	var out []statsapi.VolumeStats
	for _, uid := range uids {
		for _, v := range c.byPod[uid].vols {
			out = append(out, v.stats)
		}
	}
	return out
}

// VolumeStats is every pod's volumes as last measured: the figures
// /stats/summary shows, pods in UID order, each pod's volumes by name. It
// measures nothing (the housekeeping loop does, every VolumeStatsPeriod),
// so that /metrics can ask at every scrape. The values are shared: the
// caller must not change them.
func (p *Provider) VolumeStats() []statsapi.VolumeStats {
	return p.volumes.all()
}

// refresh measures the volumes of every pod not measured within period
// and forgets pods that are gone.
func (c *volumeCache) refresh(ctx context.Context, pods []*v1.Pod, dirs func(*v1.Pod) []VolumeDir, period time.Duration, clk clock.Clock, metrics Metrics) {
	if dirs == nil {
		return
	}
	want := map[types.UID]bool{}
	for _, pod := range pods {
		want[pod.UID] = true
		c.mu.Lock()
		last, ok := c.byPod[pod.UID]
		c.mu.Unlock()
		if ok && clk.Since(last.measured) < period {
			continue
		}
		want := dirs(pod)
		vols := measureVolumes(ctx, pod, want, clk, metrics)
		entry := podVolumes{vols: vols}
		// A pod whose volumes are not all set up yet (it is starting) is
		// measured again at the next round rather than a period later.
		if len(vols) == len(want) {
			entry.measured = clk.Now()
		}
		c.mu.Lock()
		c.byPod[pod.UID] = entry
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.byPod {
		if !want[uid] {
			delete(c.byPod, uid)
		}
	}
}

// measureVolumes walks each volume directory that exists; one not set up
// yet is left out. Walks are timed into metrics; a driver's measurement
// is not, for want of the driver's name to label it with.
func measureVolumes(ctx context.Context, pod *v1.Pod, dirs []VolumeDir, clk clock.Clock, metrics Metrics) []volumeStat {
	logger := klog.FromContext(ctx)
	claims := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
		if v.Ephemeral != nil { // the claim the controller makes for the pod
			claims[v.Name] = pod.Name + "-" + v.Name
		}
	}
	var out []volumeStat
	for _, d := range dirs {
		now := clk.Now()
		if d.Usage != nil {
			fsStats, err := d.Usage(ctx)
			if err != nil {
				logger.V(2).Info("Volume stats failed", "pod", klog.KObj(pod), "volume", d.Name, "err", err.Error())
				continue
			}
			vs := statsapi.VolumeStats{Name: d.Name, FsStats: *fsStats}
			if claim, ok := claims[d.Name]; ok {
				vs.PVCRef = &statsapi.PVCReference{Name: claim, Namespace: pod.Namespace}
			}
			out = append(out, volumeStat{stats: vs})
			continue
		}
		u, err := diskUsage(d.Path)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				logger.V(2).Info("Measuring a volume failed", "pod", klog.KObj(pod), "volume", d.Name, "err", err.Error())
			}
			continue
		}
		metrics.ObserveVolumeMetricCollection(agentmetrics.VolumeMetricSourceDu, clk.Since(now))
		fsi, err := statFS(d.Path, now)
		if err != nil {
			continue
		}
		vs := statsapi.VolumeStats{Name: d.Name, FsStats: *fsi.shareOf(u.bytes, u.inodes, now)}
		if claim, ok := claims[d.Name]; ok {
			vs.PVCRef = &statsapi.PVCReference{Name: claim, Namespace: pod.Namespace}
		}
		out = append(out, volumeStat{stats: vs, ephemeral: ephemeralPlugins[d.Plugin]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].stats.Name < out[j].stats.Name })
	return out
}
