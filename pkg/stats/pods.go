package stats

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodeagent/nodeagent/pkg/poddir"
)

// The kubelet's container label with the container's name in its pod.
const labelContainerName = "io.kubernetes.container.name"

// podFs is what the pods' filesystem stats are measured against.
type podFs struct {
	root, logs fsInfo
	// byMount caches statfs of the runtime's writable-layer filesystems.
	byMount map[string]fsInfo
}

// runtimePods is what the runtime says of the pods at one moment: the
// ready sandboxes (the newest per pod), the running containers and the
// stats of both.
type runtimePods struct {
	sandboxes []*runtimeapi.PodSandbox
	running   map[string]*runtimeapi.Container
	// bySandbox holds the runtime's sandbox stats, when it has them.
	bySandbox           map[string]*runtimeapi.PodSandboxStats
	containersBySandbox map[string][]*runtimeapi.ContainerStats
}

// listRuntimePods asks the runtime for its ready sandboxes, running
// containers and their stats.
func (p *Provider) listRuntimePods(ctx context.Context) (*runtimePods, error) {
	logger := klog.FromContext(ctx)
	sbResp, err := p.cfg.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	cResp, err := p.cfg.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	rp := &runtimePods{
		sandboxes:           newestSandboxes(sbResp.GetItems()),
		running:             map[string]*runtimeapi.Container{},
		bySandbox:           map[string]*runtimeapi.PodSandboxStats{},
		containersBySandbox: map[string][]*runtimeapi.ContainerStats{},
	}
	for _, c := range cResp.GetContainers() {
		rp.running[c.GetId()] = c
	}

	// Prefer the runtime's sandbox stats; runtimes without them get the
	// containers' stats and the pod cgroups read here.
	sbStats, err := p.cfg.Runtime.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{}})
	switch {
	case err == nil:
		for _, s := range sbStats.GetStats() {
			id := s.GetAttributes().GetId()
			rp.bySandbox[id] = s
			rp.containersBySandbox[id] = append(rp.containersBySandbox[id], s.GetLinux().GetContainers()...)
		}
	default:
		// containerd fails the whole list when one sandbox cannot be
		// read: the containers' stats and the pod cgroups still can.
		if status.Code(err) != codes.Unimplemented {
			logger.V(2).Info("Listing pod sandbox stats failed; using container stats", "err", err.Error())
		}
		cs, err := p.cfg.Runtime.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{}})
		if err != nil {
			return nil, fmt.Errorf("list container stats: %w", err)
		}
		for _, s := range cs.GetStats() {
			if c, ok := rp.running[s.GetAttributes().GetId()]; ok {
				rp.containersBySandbox[c.GetPodSandboxId()] = append(rp.containersBySandbox[c.GetPodSandboxId()], s)
			}
		}
	}
	return rp, nil
}

// podStats lists the pods with a running sandbox and the running
// containers in them.
func (p *Provider) podStats(ctx context.Context, full bool) ([]statsapi.PodStats, error) {
	logger := klog.FromContext(ctx)
	now := p.cfg.Clock.Now()
	rp, err := p.listRuntimePods(ctx)
	if err != nil {
		return nil, err
	}
	running, bySandbox, containersBySandbox := rp.running, rp.bySandbox, rp.containersBySandbox

	specs := map[types.UID]*v1.Pod{}
	for _, pod := range p.cfg.Pods() {
		specs[pod.UID] = pod
	}
	var fsi *podFs
	if full {
		fsi = p.podFilesystems(ctx, now)
	}
	out := make([]statsapi.PodStats, 0, len(rp.sandboxes))
	for _, sb := range rp.sandboxes {
		md := sb.GetMetadata()
		ps := statsapi.PodStats{
			PodRef:    statsapi.PodReference{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()},
			StartTime: metav1.NewTime(time.Unix(0, sb.GetCreatedAt())),
		}
		for _, cs := range containersBySandbox[sb.GetId()] {
			c, ok := running[cs.GetAttributes().GetId()]
			if !ok {
				continue
			}
			ps.Containers = append(ps.Containers, p.containerStats(ctx, now, cs, c, md, fsi))
		}
		sort.Slice(ps.Containers, func(i, j int) bool { return ps.Containers[i].Name < ps.Containers[j].Name })
		sbStat := bySandbox[sb.GetId()]
		p.podCPUAndMemory(ctx, now, &ps, sbStat, specs[types.UID(md.GetUid())])
		if full {
			ps.Network = networkStats(sbStat.GetLinux().GetNetwork())
			if n := sbStat.GetLinux().GetProcess().GetProcessCount(); n != nil {
				ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: ptr(n.GetValue())}
			}
			p.podStorage(ctx, &ps, fsi)
		}
		out = append(out, ps)
	}
	if len(out) == 0 {
		logger.V(5).Info("No pods to report")
	}
	return out, nil
}

// newestSandboxes keeps one sandbox per pod, the newest, ordered by
// namespace and name.
func newestSandboxes(sbs []*runtimeapi.PodSandbox) []*runtimeapi.PodSandbox {
	byPod := map[string]*runtimeapi.PodSandbox{}
	for _, sb := range sbs {
		md := sb.GetMetadata()
		key := md.GetNamespace() + "/" + md.GetName()
		if old, ok := byPod[key]; !ok || sb.GetCreatedAt() > old.GetCreatedAt() {
			byPod[key] = sb
		}
	}
	out := make([]*runtimeapi.PodSandbox, 0, len(byPod))
	for _, sb := range byPod {
		out = append(out, sb)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].GetMetadata(), out[j].GetMetadata()
		if a.GetNamespace() != b.GetNamespace() {
			return a.GetNamespace() < b.GetNamespace()
		}
		return a.GetName() < b.GetName()
	})
	return out
}

// containerStats converts the runtime's stats of one container. Its CPU
// rate is the runtime's when it gives one, else measured here.
func (p *Provider) containerStats(ctx context.Context, now time.Time, cs *runtimeapi.ContainerStats, c *runtimeapi.Container, md *runtimeapi.PodSandboxMetadata, fsi *podFs) statsapi.ContainerStats {
	name := c.GetLabels()[labelContainerName]
	if name == "" {
		name = cs.GetAttributes().GetMetadata().GetName()
	}
	out := statsapi.ContainerStats{
		Name: name,
		// As the kubelet: a container's start time is its creation.
		StartTime: metav1.NewTime(time.Unix(0, c.GetCreatedAt())),
	}
	if cpu := cs.GetCpu(); cpu != nil {
		out.CPU = &statsapi.CPUStats{Time: stamp(cpu.GetTimestamp(), now)}
		if v := cpu.GetUsageCoreNanoSeconds(); v != nil {
			out.CPU.UsageCoreNanoSeconds = ptr(v.GetValue())
			out.CPU.UsageNanoCores = p.rates.observe("container:"+c.GetId(), out.CPU.Time.Time, v.GetValue())
		}
		if v := cpu.GetUsageNanoCores(); v != nil {
			out.CPU.UsageNanoCores = ptr(v.GetValue())
		}
	}
	out.Memory = criMemoryStats(cs.GetMemory(), now)
	if sw := cs.GetSwap(); sw != nil {
		out.Swap = &statsapi.SwapStats{Time: stamp(sw.GetTimestamp(), now)}
		if v := sw.GetSwapUsageBytes(); v != nil {
			out.Swap.SwapUsageBytes = ptr(v.GetValue())
		}
		if v := sw.GetSwapAvailableBytes(); v != nil {
			out.Swap.SwapAvailableBytes = ptr(v.GetValue())
		}
	}
	if fsi == nil {
		return out
	}
	if wl := cs.GetWritableLayer(); wl != nil {
		fs, ok := fsi.forMount(wl.GetFsId().GetMountpoint(), now)
		if !ok {
			fs = fsInfo{}
		}
		out.Rootfs = fs.shareOf(wl.GetUsedBytes().GetValue(), wl.GetInodesUsed().GetValue(), stamp(wl.GetTimestamp(), now).Time)
		if !ok {
			out.Rootfs.AvailableBytes, out.Rootfs.CapacityBytes, out.Rootfs.Inodes, out.Rootfs.InodesFree = nil, nil, nil, nil
		}
	}
	logDir := filepath.Join(p.podLogDir(md), name)
	if u, err := filesUsage(logDir); err == nil {
		out.Logs = fsi.logs.shareOf(u.bytes, u.inodes, now)
	} else {
		klog.FromContext(ctx).V(4).Info("Reading a container's log usage failed", "dir", logDir, "err", err.Error())
	}
	return out
}

func (p *Provider) podLogDir(md *runtimeapi.PodSandboxMetadata) string {
	return filepath.Join(p.cfg.PodLogsDir, fmt.Sprintf("%s_%s_%s", md.GetNamespace(), md.GetName(), md.GetUid()))
}

// podCPUAndMemory fills the pod's own CPU and memory: the runtime's
// sandbox stats, else the pod cgroup, else the sum of its containers.
func (p *Provider) podCPUAndMemory(ctx context.Context, now time.Time, ps *statsapi.PodStats, sbStat *runtimeapi.PodSandboxStats, spec *v1.Pod) {
	if l := sbStat.GetLinux(); l != nil && l.GetCpu() != nil && l.GetMemory() != nil {
		cpu := l.GetCpu()
		ps.CPU = &statsapi.CPUStats{Time: stamp(cpu.GetTimestamp(), now)}
		if v := cpu.GetUsageCoreNanoSeconds(); v != nil {
			ps.CPU.UsageCoreNanoSeconds = ptr(v.GetValue())
			ps.CPU.UsageNanoCores = p.rates.observe("pod:"+ps.PodRef.UID, ps.CPU.Time.Time, v.GetValue())
		}
		if v := cpu.GetUsageNanoCores(); v != nil {
			ps.CPU.UsageNanoCores = ptr(v.GetValue())
		}
		ps.Memory = criMemoryStats(l.GetMemory(), now)
		return
	}
	if spec != nil && p.cfg.PodCgroup != nil {
		path, err := p.cfg.PodCgroup(spec)
		if err == nil {
			var u cgroupUsage
			if u, err = p.cgroups.read(path); err == nil {
				ps.CPU = p.cpuStats(cgroupKey(path), now, u.cpu)
				ps.Memory = memoryStats(now, u, u.memLimit)
				return
			}
		}
		klog.FromContext(ctx).V(4).Info("Reading a pod's cgroup failed", "pod", klog.KRef(ps.PodRef.Namespace, ps.PodRef.Name), "err", err.Error())
	}
	ps.CPU, ps.Memory = sumContainers(now, ps.Containers)
}

// sumContainers adds up the containers' CPU and memory, for a pod whose
// own cgroup cannot be read; a rate is given only when every container
// has one.
func sumContainers(now time.Time, cs []statsapi.ContainerStats) (*statsapi.CPUStats, *statsapi.MemoryStats) {
	cpu := &statsapi.CPUStats{Time: metav1.NewTime(now), UsageCoreNanoSeconds: ptr[uint64](0), UsageNanoCores: ptr[uint64](0)}
	mem := &statsapi.MemoryStats{Time: metav1.NewTime(now), WorkingSetBytes: ptr[uint64](0), UsageBytes: ptr[uint64](0), RSSBytes: ptr[uint64](0)}
	add := func(sum **uint64, v *uint64) {
		if *sum == nil {
			return
		}
		if v == nil {
			*sum = nil
			return
		}
		**sum += *v
	}
	for _, c := range cs {
		if c.CPU == nil {
			cpu.UsageCoreNanoSeconds, cpu.UsageNanoCores = nil, nil
		} else {
			add(&cpu.UsageCoreNanoSeconds, c.CPU.UsageCoreNanoSeconds)
			add(&cpu.UsageNanoCores, c.CPU.UsageNanoCores)
		}
		if c.Memory == nil {
			mem.WorkingSetBytes, mem.UsageBytes, mem.RSSBytes = nil, nil, nil
		} else {
			add(&mem.WorkingSetBytes, c.Memory.WorkingSetBytes)
			add(&mem.UsageBytes, c.Memory.UsageBytes)
			add(&mem.RSSBytes, c.Memory.RSSBytes)
		}
	}
	return cpu, mem
}

func criMemoryStats(m *runtimeapi.MemoryUsage, now time.Time) *statsapi.MemoryStats {
	if m == nil {
		return nil
	}
	val := func(v *runtimeapi.UInt64Value) *uint64 {
		if v == nil {
			return nil
		}
		return ptr(v.GetValue())
	}
	return &statsapi.MemoryStats{
		Time:            stamp(m.GetTimestamp(), now),
		AvailableBytes:  val(m.GetAvailableBytes()),
		UsageBytes:      val(m.GetUsageBytes()),
		WorkingSetBytes: val(m.GetWorkingSetBytes()),
		RSSBytes:        val(m.GetRssBytes()),
		PageFaults:      val(m.GetPageFaults()),
		MajorPageFaults: val(m.GetMajorPageFaults()),
	}
}

func networkStats(n *runtimeapi.NetworkUsage) *statsapi.NetworkStats {
	if n == nil {
		return nil
	}
	iface := func(i *runtimeapi.NetworkInterfaceUsage) statsapi.InterfaceStats {
		is := statsapi.InterfaceStats{Name: i.GetName()}
		if v := i.GetRxBytes(); v != nil {
			is.RxBytes = ptr(v.GetValue())
		}
		if v := i.GetRxErrors(); v != nil {
			is.RxErrors = ptr(v.GetValue())
		}
		if v := i.GetTxBytes(); v != nil {
			is.TxBytes = ptr(v.GetValue())
		}
		if v := i.GetTxErrors(); v != nil {
			is.TxErrors = ptr(v.GetValue())
		}
		return is
	}
	out := &statsapi.NetworkStats{Time: metav1.NewTime(time.Unix(0, n.GetTimestamp()))}
	if d := n.GetDefaultInterface(); d != nil {
		out.InterfaceStats = iface(d)
	}
	for _, i := range n.GetInterfaces() {
		out.Interfaces = append(out.Interfaces, iface(i))
	}
	return out
}

// stamp turns a CRI timestamp (nanoseconds) into a time, now when unset.
func stamp(ns int64, now time.Time) metav1.Time {
	if ns <= 0 {
		return metav1.NewTime(now)
	}
	return metav1.NewTime(time.Unix(0, ns))
}

// podFilesystems reads the filesystems the pods' usage is shown against.
func (p *Provider) podFilesystems(ctx context.Context, now time.Time) *podFs {
	logger := klog.FromContext(ctx)
	fsi := &podFs{byMount: map[string]fsInfo{}}
	var err error
	if fsi.root, err = statFS(p.cfg.RootDir, now); err != nil {
		logger.V(2).Info("Reading the root filesystem failed", "err", err.Error())
	}
	if fsi.logs, err = statFS(p.cfg.PodLogsDir, now); err != nil {
		fsi.logs = fsi.root
	}
	return fsi
}

func (f *podFs) forMount(mountpoint string, now time.Time) (fsInfo, bool) {
	if mountpoint == "" {
		return fsInfo{}, false
	}
	if fs, ok := f.byMount[mountpoint]; ok {
		return fs, true
	}
	fs, err := statFS(mountpoint, now)
	if err != nil {
		return fsInfo{}, false
	}
	f.byMount[mountpoint] = fs
	return fs, true
}

// podStorage fills the pod's volume stats and its ephemeral storage: the
// containers' writable layers and logs, the pod's ephemeral volumes, its
// own log files and its hosts file, against the root filesystem.
func (p *Provider) podStorage(ctx context.Context, ps *statsapi.PodStats, fsi *podFs) {
	uid := types.UID(ps.PodRef.UID)
	vols := p.volumes.get(uid)
	var used, inodes uint64
	at := fsi.root.at
	for _, c := range ps.Containers {
		if c.Rootfs != nil {
			used += deref(c.Rootfs.UsedBytes)
			inodes += deref(c.Rootfs.InodesUsed)
		}
		if c.Logs != nil {
			used += deref(c.Logs.UsedBytes)
			inodes += deref(c.Logs.InodesUsed)
		}
	}
	for _, v := range vols {
		ps.VolumeStats = append(ps.VolumeStats, v.stats)
		if v.ephemeral {
			used += deref(v.stats.UsedBytes)
			inodes += deref(v.stats.InodesUsed)
		}
	}
	md := &runtimeapi.PodSandboxMetadata{Name: ps.PodRef.Name, Namespace: ps.PodRef.Namespace, Uid: ps.PodRef.UID}
	if u, err := filesUsage(p.podLogDir(md)); err == nil {
		used += u.bytes
		inodes += u.inodes
	}
	if u, err := diskUsage(poddir.New(p.cfg.RootDir).Pod(uid).EtcHosts()); err == nil {
		used += u.bytes
		inodes += u.inodes
	}
	ps.EphemeralStorage = fsi.root.shareOf(used, inodes, at)
	klog.FromContext(ctx).V(6).Info("Pod storage", "pod", klog.KRef(ps.PodRef.Namespace, ps.PodRef.Name), "ephemeralBytes", used)
}

func deref(v *uint64) uint64 {
	if v == nil {
		return 0
	}
	return *v
}
