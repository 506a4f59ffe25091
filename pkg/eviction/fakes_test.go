package eviction

import (
	"context"
	"errors"
	"fmt"
	gosync "sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func u64(v int64) *uint64 { x := uint64(v); return &x }

// nodeStats are the node's numbers in a summary; zero leaves a part out.
type nodeStats struct {
	memAvail, memWS      int64
	podsAvail, podsWS    int64
	fsAvail, fsCap       int64
	inodesFree, inodes   int64
	imageAvail, imageCap int64
	maxPID, procs        int64
	at                   metav1.Time
}

func summary(n nodeStats, pods ...statsapi.PodStats) *statsapi.Summary {
	s := &statsapi.Summary{Pods: pods}
	if n.memAvail+n.memWS > 0 {
		s.Node.Memory = &statsapi.MemoryStats{Time: n.at, AvailableBytes: u64(n.memAvail), WorkingSetBytes: u64(n.memWS)}
	}
	if n.podsAvail+n.podsWS > 0 {
		s.Node.SystemContainers = append(s.Node.SystemContainers, statsapi.ContainerStats{Name: statsapi.SystemContainerPods,
			Memory: &statsapi.MemoryStats{Time: n.at, AvailableBytes: u64(n.podsAvail), WorkingSetBytes: u64(n.podsWS)}})
	}
	if n.fsCap > 0 {
		s.Node.Fs = &statsapi.FsStats{Time: n.at, AvailableBytes: u64(n.fsAvail), CapacityBytes: u64(n.fsCap)}
		if n.inodes > 0 {
			s.Node.Fs.InodesFree, s.Node.Fs.Inodes = u64(n.inodesFree), u64(n.inodes)
		}
	}
	if n.imageCap > 0 {
		fs := &statsapi.FsStats{Time: n.at, AvailableBytes: u64(n.imageAvail), CapacityBytes: u64(n.imageCap)}
		s.Node.Runtime = &statsapi.RuntimeStats{ImageFs: fs, ContainerFs: fs}
	}
	if n.maxPID > 0 {
		s.Node.Rlimit = &statsapi.RlimitStats{Time: n.at, MaxPID: &n.maxPID, NumOfRunningProcesses: &n.procs}
	}
	return s
}

// podStats is a pod's usage: memory working set and, per container, the
// working set, writable layer and logs.
func podStats(pod *v1.Pod, mem int64, containers ...statsapi.ContainerStats) statsapi.PodStats {
	return statsapi.PodStats{
		PodRef:     statsapi.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
		Memory:     &statsapi.MemoryStats{WorkingSetBytes: u64(mem)},
		Containers: containers,
	}
}

func ctrStats(name string, mem, rootfs, logs int64) statsapi.ContainerStats {
	return statsapi.ContainerStats{Name: name,
		Memory: &statsapi.MemoryStats{WorkingSetBytes: u64(mem)},
		Rootfs: &statsapi.FsStats{UsedBytes: u64(rootfs), InodesUsed: u64(rootfs / 4096)},
		Logs:   &statsapi.FsStats{UsedBytes: u64(logs), InodesUsed: u64(1)},
	}
}

// fakeStats answers with its summaries in turn, the last one again;
// NodeSummary takes its turn too, and answers without the pods.
type fakeStats struct {
	mu        gosync.Mutex
	summaries []*statsapi.Summary
	calls     int
	err       error
	// withPods and nodeOnly count the calls of each kind.
	withPods, nodeOnly int
}

func (f *fakeStats) Summary(context.Context, bool) (*statsapi.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.withPods++
	return f.next()
}

func (f *fakeStats) NodeSummary(context.Context) (*statsapi.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodeOnly++
	s, err := f.next()
	if err != nil {
		return nil, err
	}
	return &statsapi.Summary{Node: s.Node}, nil
}

func (f *fakeStats) next() (*statsapi.Summary, error) {
	if f.err != nil {
		return nil, f.err
	}
	i := min(f.calls, len(f.summaries)-1)
	f.calls++
	return f.summaries[i], nil
}

// fakePods records evictions, and the condition each asked for.
type fakePods struct {
	mu         gosync.Mutex
	pods       []*v1.Pod
	refuse     map[types.UID]bool
	evicted    []string
	conditions []*v1.PodCondition
	ended      map[types.UID]bool
}

func (f *fakePods) ActivePods() []*v1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods
}

func (f *fakePods) Evict(uid types.UID, reason, message string, grace int64, condition *v1.PodCondition) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse[uid] {
		return errors.New("pod is not running")
	}
	f.evicted = append(f.evicted, fmt.Sprintf("%s grace=%d %s: %s", uid, grace, reason, message))
	f.conditions = append(f.conditions, condition)
	return nil
}

// fakeMetrics records evictions as signal names and stats ages as
// "signal age".
type fakeMetrics struct {
	evictions []string
	ages      []string
}

func (m *fakeMetrics) ObserveEviction(signal string) { m.evictions = append(m.evictions, signal) }

func (m *fakeMetrics) ObserveEvictionStatsAge(signal string, age time.Duration) {
	m.ages = append(m.ages, fmt.Sprintf("%s %s", signal, age))
}

func (f *fakePods) PodEnded(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended[uid]
}

// fakeGC records the reclaims asked of it, in order, into a shared log.
type fakeGC struct {
	log   *[]string
	onRun func()
}

func (f fakeGC) DeleteUnusedImages(context.Context) error {
	*f.log = append(*f.log, "images")
	if f.onRun != nil {
		f.onRun()
	}
	return nil
}

func (f fakeGC) DeleteAllUnusedContainers(context.Context) error {
	*f.log = append(*f.log, "containers")
	return nil
}

type fixedDisks DiskLayout

func (d fixedDisks) Layout(context.Context) (DiskLayout, error) { return DiskLayout(d), nil }

// fakeRecorder records events as "<kind>/<name> <type> <reason> <message>".
type fakeRecorder struct {
	mu          gosync.Mutex
	events      []string
	annotations []map[string]string
}

func (r *fakeRecorder) Eventf(o kruntime.Object, typ, reason, format string, args ...interface{}) {
	r.AnnotatedEventf(o, nil, typ, reason, format, args...)
}

func (r *fakeRecorder) AnnotatedEventf(o kruntime.Object, ann map[string]string, typ, reason, format string, args ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := ""
	switch x := o.(type) {
	case *v1.Pod:
		name = "pod/" + x.Name
	case *v1.ObjectReference:
		name = "node/" + x.Name
	}
	r.events = append(r.events, fmt.Sprintf("%s %s %s %s", name, typ, reason, fmt.Sprintf(format, args...)))
	r.annotations = append(r.annotations, ann)
}

func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t) }
