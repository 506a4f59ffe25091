package eviction

import (
	"cmp"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// podUsage finds a pod's stats in the summary.
type podUsage func(*v1.Pod) (statsapi.PodStats, bool)

func usageOf(pods []statsapi.PodStats) podUsage {
	byUID := make(map[string]statsapi.PodStats, len(pods))
	for _, p := range pods {
		byUID[p.PodRef.UID] = p
	}
	return func(pod *v1.Pod) (statsapi.PodStats, bool) {
		s, ok := byUID[string(pod.UID)]
		return s, ok
	}
}

// fsPart is a part of a pod's disk usage, as the kubelet measures them.
type fsPart int

const (
	fsRoot   fsPart = 1 << iota // the containers' writable layers
	fsLogs                      // the containers' logs
	fsLocal                     // the pod's local volumes (emptyDir, hostPath…)
	fsImages                    // the containers' images (counted nowhere, as in the kubelet)
)

// ranker orders pods for eviction, the first to go first.
type ranker func(pods []*v1.Pod, usage podUsage)

// rankers are the orders for each signal, which depend on which
// filesystem holds what, as in the kubelet.
func rankers(layout DiskLayout) map[Signal]ranker {
	r := map[Signal]ranker{
		SignalMemoryAvailable:            rankMemory,
		SignalAllocatableMemoryAvailable: rankMemory,
		SignalPIDAvailable:               rankPIDs,
	}
	disk := func(bytesParts, inodeParts fsPart) (ranker, ranker) {
		return rankDisk(bytesParts, v1.ResourceEphemeralStorage), rankDisk(inodeParts, resourceInodes)
	}
	switch {
	case layout.DedicatedImageFs && !layout.SplitContainerFs:
		// nodefs holds logs and volumes; imagefs images and writable layers.
		r[SignalNodeFsAvailable], r[SignalNodeFsInodesFree] = disk(fsLogs|fsLocal, fsLogs|fsLocal)
		r[SignalImageFsAvailable], r[SignalImageFsInodesFree] = disk(fsRoot|fsImages, fsRoot|fsImages)
		r[SignalContainerFsAvailable], r[SignalContainerFsInodesFree] = r[SignalImageFsAvailable], r[SignalImageFsInodesFree]
	case layout.DedicatedImageFs:
		// nodefs holds logs, volumes and writable layers; imagefs images.
		r[SignalNodeFsAvailable], r[SignalNodeFsInodesFree] = disk(fsLogs|fsLocal|fsRoot, fsLogs|fsLocal|fsRoot)
		r[SignalImageFsAvailable], r[SignalImageFsInodesFree] = disk(fsImages, fsImages)
		r[SignalContainerFsAvailable], r[SignalContainerFsInodesFree] = r[SignalNodeFsAvailable], r[SignalNodeFsInodesFree]
	default:
		// One filesystem holds everything.
		all := fsImages | fsRoot | fsLogs | fsLocal
		r[SignalNodeFsAvailable], r[SignalNodeFsInodesFree] = disk(all, all)
		r[SignalImageFsAvailable], r[SignalImageFsInodesFree] = r[SignalNodeFsAvailable], r[SignalNodeFsInodesFree]
		r[SignalContainerFsAvailable], r[SignalContainerFsInodesFree] = r[SignalNodeFsAvailable], r[SignalNodeFsInodesFree]
	}
	return r
}

// order sorts pods by the comparisons in turn.
func order(pods []*v1.Pod, cmps ...func(a, b *v1.Pod) int) {
	slices.SortStableFunc(pods, func(a, b *v1.Pod) int {
		for _, c := range cmps {
			if r := c(a, b); r != 0 {
				return r
			}
		}
		return 0
	})
}

// rankMemory: pods using more memory than they request first, then the
// lower priority, then the larger use above the request.
func rankMemory(pods []*v1.Pod, usage podUsage) {
	memUse := func(p *v1.Pod) (int64, bool) {
		s, ok := usage(p)
		if !ok {
			return 0, false
		}
		return workingSet(s.Memory), true
	}
	order(pods,
		exceedsRequest(memUse, func(p *v1.Pod) int64 { return request(p, v1.ResourceMemory) }),
		byPriority,
		moreAboveRequest(memUse, func(p *v1.Pod) int64 { return request(p, v1.ResourceMemory) }))
}

// rankPIDs: the lower priority first, then the more processes.
func rankPIDs(pods []*v1.Pod, usage podUsage) {
	procs := func(p *v1.Pod) (int64, bool) {
		s, ok := usage(p)
		if !ok {
			return 0, false
		}
		if s.ProcessStats == nil || s.ProcessStats.ProcessCount == nil {
			return 0, true
		}
		return int64(*s.ProcessStats.ProcessCount), true
	}
	order(pods, byPriority, moreAboveRequest(procs, func(*v1.Pod) int64 { return 0 }))
}

// rankDisk: pods using more of the resource (bytes or inodes) on the
// parts measured than they request first, then the lower priority, then
// the larger use above the ephemeral-storage request. (The kubelet
// subtracts the ephemeral-storage request from inodes too; so does this.)
func rankDisk(parts fsPart, res v1.ResourceName) ranker {
	return func(pods []*v1.Pod, usage podUsage) {
		use := func(p *v1.Pod) (int64, bool) {
			s, ok := usage(p)
			if !ok {
				return 0, false
			}
			b, i := diskUse(s, p, parts)
			if res == resourceInodes {
				return i, true
			}
			return b, true
		}
		order(pods,
			exceedsRequest(use, func(p *v1.Pod) int64 { return request(p, res) }),
			byPriority,
			moreAboveRequest(use, func(p *v1.Pod) int64 { return request(p, v1.ResourceEphemeralStorage) }))
	}
}

// exceedsRequest puts first the pods without stats, then those whose use
// exceeds their request.
func exceedsRequest(use func(*v1.Pod) (int64, bool), req func(*v1.Pod) int64) func(a, b *v1.Pod) int {
	return func(a, b *v1.Pod) int {
		ua, oka := use(a)
		ub, okb := use(b)
		if !oka || !okb {
			return trueFirst(!oka, !okb)
		}
		return trueFirst(ua > req(a), ub > req(b))
	}
}

// moreAboveRequest puts first the pods without stats, then the larger
// use less request.
func moreAboveRequest(use func(*v1.Pod) (int64, bool), req func(*v1.Pod) int64) func(a, b *v1.Pod) int {
	return func(a, b *v1.Pod) int {
		ua, oka := use(a)
		ub, okb := use(b)
		if !oka || !okb {
			return trueFirst(!oka, !okb)
		}
		return cmp.Compare(ub-req(b), ua-req(a))
	}
}

// byPriority puts the lower priority first.
func byPriority(a, b *v1.Pod) int {
	return cmp.Compare(corev1helpers.PodPriority(a), corev1helpers.PodPriority(b))
}

func trueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// request is what the pod requests of a resource, as the kubelet counts
// it for eviction: the pod-level request when set, else its containers'
// (init containers as the scheduler counts them), plus the pod overhead
// when the request is not zero.
func request(pod *v1.Pod, name v1.ResourceName) int64 {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		SkipContainerLevelResources: resourcehelper.IsPodLevelResourcesSet(pod),
		ExcludeOverhead:             true,
	})
	q, ok := reqs[name]
	if !ok || q.IsZero() {
		return 0
	}
	if o, ok := pod.Spec.Overhead[name]; ok {
		q.Add(o)
	}
	return q.Value()
}

func workingSet(m *statsapi.MemoryStats) int64 {
	if m == nil || m.WorkingSetBytes == nil {
		return 0
	}
	return int64(*m.WorkingSetBytes)
}

func fsUsed(fs *statsapi.FsStats) (int64, int64) {
	if fs == nil {
		return 0, 0
	}
	var b, i int64
	if fs.UsedBytes != nil {
		b = int64(*fs.UsedBytes)
	}
	if fs.InodesUsed != nil {
		i = int64(*fs.InodesUsed)
	}
	return b, i
}

// diskUse adds up the parts of the pod's disk usage: bytes and inodes.
func diskUse(s statsapi.PodStats, pod *v1.Pod, parts fsPart) (int64, int64) {
	var bytes, inodes int64
	add := func(fs *statsapi.FsStats) {
		b, i := fsUsed(fs)
		bytes += b
		inodes += i
	}
	for _, c := range s.Containers {
		if parts&fsRoot != 0 {
			add(c.Rootfs)
		}
		if parts&fsLogs != 0 {
			add(c.Logs)
		}
	}
	if parts&fsLocal != 0 {
		local := map[string]bool{}
		for _, v := range pod.Spec.Volumes {
			if localVolume(v) {
				local[v.Name] = true
			}
		}
		for _, v := range s.VolumeStats {
			if local[v.Name] {
				add(&v.FsStats)
			}
		}
	}
	return bytes, inodes
}

// localVolume says whether a volume counts as the pod's local storage,
// as the kubelet lists them: hostPath, gitRepo, configMap and emptyDir on
// the node's disk.
func localVolume(v v1.Volume) bool {
	return v.HostPath != nil || v.GitRepo != nil || v.ConfigMap != nil ||
		(v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault)
}

// quantity shows a count the way the kubelet's messages do.
func quantity(n int64, res v1.ResourceName) string {
	format := resource.DecimalSI
	if res == v1.ResourceMemory || res == v1.ResourceEphemeralStorage {
		format = resource.BinarySI
	}
	return resource.NewQuantity(n, format).String()
}
