package stats

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// rootKey is the root cgroup's key among the CPU rates.
const rootKey = "cgroup:/"

func cgroupKey(path string) string { return "cgroup:" + filepath.Clean("/"+path) }

// nodeView says which of the node's figures nodeStats reads beside the
// root cgroup's.
type nodeView int

const (
	// nodeCPUAndMemory: the system containers too.
	nodeCPUAndMemory nodeView = iota
	// nodeFull: the system containers, the network, the filesystems (the
	// root dir's and the runtime's) and the process limits.
	nodeFull
	// nodeSignals: what the eviction signals read; the pods' system
	// container, the filesystems and the process limits.
	nodeSignals
)

// nodeStats reads the root cgroup (the whole machine) and what view asks.
func (p *Provider) nodeStats(ctx context.Context, view nodeView) (statsapi.NodeStats, error) {
	now := p.cfg.Clock.Now()
	root, err := p.cgroups.read("/")
	if err != nil {
		return statsapi.NodeStats{}, fmt.Errorf("read root cgroup: %w", err)
	}
	ns := statsapi.NodeStats{
		NodeName:  p.cfg.NodeName,
		StartTime: metav1.NewTime(p.bootTime),
		CPU:       p.cpuStats(rootKey, now, root.cpu),
		// The root cgroup has no limit: what is available is what the
		// machine has, less the working set.
		Memory:           memoryStats(now, root, p.memTotal),
		SystemContainers: p.systemContainerStats(ctx, now, view == nodeSignals),
	}
	if view == nodeCPUAndMemory {
		return ns, nil
	}
	logger := klog.FromContext(ctx)
	if view == nodeFull {
		if net, err := p.nodeNetwork(now); err == nil {
			ns.Network = net
		} else {
			logger.V(2).Info("Reading the node's network counters failed", "err", err.Error())
		}
	}
	if fs, err := statFS(p.cfg.RootDir, now); err == nil {
		ns.Fs = fs.fsStats()
	} else {
		logger.Error(err, "Reading the root filesystem failed")
	}
	ns.Runtime = p.runtimeFs(ctx, now, view == nodeSignals)
	if rl, err := p.rlimit(now); err == nil {
		ns.Rlimit = rl
	} else {
		logger.V(2).Info("Reading process limits failed", "err", err.Error())
	}
	return ns, nil
}

func (p *Provider) cpuStats(key string, now time.Time, usage uint64) *statsapi.CPUStats {
	return &statsapi.CPUStats{
		Time:                 metav1.NewTime(now),
		UsageNanoCores:       p.rates.observe(key, now, usage),
		UsageCoreNanoSeconds: ptr(usage),
	}
}

// memoryStats shows a cgroup's memory; limit (0: none) gives the
// available bytes, what is left before the working set reaches it.
func memoryStats(now time.Time, u cgroupUsage, limit uint64) *statsapi.MemoryStats {
	m := &statsapi.MemoryStats{
		Time:            metav1.NewTime(now),
		UsageBytes:      ptr(u.memUsage),
		WorkingSetBytes: ptr(u.workingSet),
		RSSBytes:        ptr(u.rss),
		PageFaults:      ptr(u.pageFaults),
		MajorPageFaults: ptr(u.majorFaults),
	}
	if limit > 0 {
		m.AvailableBytes = ptr(subFloor(limit, u.workingSet))
	}
	return m
}

type systemContainer struct {
	name, cgroup string
	start        time.Time
}

// systemContainers are the configured system cgroups worth reporting: a
// process in the root cgroup has no container of its own.
func (p *Provider) systemContainers() []systemContainer {
	var out []systemContainer
	add := func(name, cgroup string, start time.Time) {
		if cgroup == "" || filepath.Clean("/"+cgroup) == "/" {
			return
		}
		out = append(out, systemContainer{name: name, cgroup: cgroup, start: start})
	}
	sc := p.cfg.SystemCgroups
	add(statsapi.SystemContainerKubelet, sc.Agent, p.cfg.StartTime)
	add(statsapi.SystemContainerRuntime, sc.Runtime, time.Time{})
	add(statsapi.SystemContainerPods, sc.Pods, time.Time{})
	return out
}

// systemContainerStats reads the system containers, or with podsOnly the
// pods' alone. A cgroup that cannot be read is logged at level 2 the first
// time (the agent's and the runtime's may be a service manager's that
// lacks a controller), then at level 4 while it stays unreadable.
func (p *Provider) systemContainerStats(ctx context.Context, now time.Time, podsOnly bool) []statsapi.ContainerStats {
	var out []statsapi.ContainerStats
	for _, sc := range p.systemContainers() {
		if podsOnly && sc.name != statsapi.SystemContainerPods {
			continue
		}
		u, err := p.cgroups.read(sc.cgroup)
		if err != nil {
			level := 2
			if _, seen := p.unreadable.LoadOrStore(sc.name, true); seen {
				level = 4
			}
			klog.FromContext(ctx).V(level).Info("Reading a system container's cgroup failed", "container", sc.name, "cgroup", sc.cgroup, "err", err.Error())
			continue
		}
		p.unreadable.Delete(sc.name)
		start := sc.start
		if start.IsZero() {
			start = u.created
		}
		out = append(out, statsapi.ContainerStats{
			Name:      sc.name,
			StartTime: metav1.NewTime(start),
			CPU:       p.cpuStats(cgroupKey(sc.cgroup), now, u.cpu),
			Memory:    memoryStats(now, u, u.memLimit),
		})
	}
	return out
}

// ignoredInterface says whether an interface is left out of the node's
// network stats, as cAdvisor leaves them out: loopback and the host ends
// of containers' veth pairs.
func ignoredInterface(name string) bool {
	for _, prefix := range []string{"lo", "veth", "docker", "nerdctl"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// nodeNetwork reads the counters of the host's interfaces; the one the
// default route leaves by is shown on top (eth0 when there is no route).
func (p *Provider) nodeNetwork(now time.Time) (*statsapi.NetworkStats, error) {
	ifaces, err := p.proc.netDev("self")
	if err != nil {
		return nil, err
	}
	def := p.proc.defaultRouteInterface("self")
	if def == "" {
		def = "eth0"
	}
	ns := &statsapi.NetworkStats{Time: metav1.NewTime(now)}
	for _, c := range ifaces {
		if ignoredInterface(c.name) {
			continue
		}
		is := statsapi.InterfaceStats{
			Name:    c.name,
			RxBytes: ptr(c.rxBytes), RxErrors: ptr(c.rxErrors),
			TxBytes: ptr(c.txBytes), TxErrors: ptr(c.txErrs),
		}
		ns.Interfaces = append(ns.Interfaces, is)
		if c.name == def {
			ns.InterfaceStats = is
		}
	}
	return ns, nil
}

// imageFsInfoReuse is how long the eviction signals' view reuses the
// runtime's last answer of where its filesystems are: the signals read
// the filesystems' free space and inodes, from statfs at each pass; the
// usage the runtime counts (stamped with its own time) is at most this
// old there.
const imageFsInfoReuse = time.Minute

// runtimeFs asks the runtime where its images and containers' writable
// layers live and how much they take; capacity and free space come from
// statfs of those filesystems. The container filesystem is the image
// filesystem unless the runtime keeps them apart. With reuse, an answer
// of the runtime's younger than imageFsInfoReuse is used again.
func (p *Provider) runtimeFs(ctx context.Context, now time.Time, reuse bool) *statsapi.RuntimeStats {
	rs, err := p.readRuntimeFs(ctx, now, reuse)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Asking the runtime for its image filesystem failed")
		return nil
	}
	return rs
}

// readRuntimeFs is runtimeFs, with the runtime's error.
func (p *Provider) readRuntimeFs(ctx context.Context, now time.Time, reuse bool) (*statsapi.RuntimeStats, error) {
	logger := klog.FromContext(ctx)
	resp, err := p.fsInfo.get(now, imageFsInfoReuse, !reuse, func() (*runtimeapi.ImageFsInfoResponse, error) {
		return p.cfg.Images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	})
	if err != nil {
		return nil, err
	}
	convert := func(fss []*runtimeapi.FilesystemUsage) *statsapi.FsStats {
		if len(fss) == 0 {
			return nil
		}
		u := fss[0]
		out := &statsapi.FsStats{Time: metav1.NewTime(now)}
		if ts := u.GetTimestamp(); ts > 0 {
			out.Time = metav1.NewTime(time.Unix(0, ts))
		}
		if u.GetUsedBytes() != nil {
			out.UsedBytes = ptr(u.GetUsedBytes().GetValue())
		}
		if u.GetInodesUsed() != nil {
			out.InodesUsed = ptr(u.GetInodesUsed().GetValue())
		}
		if mp := u.GetFsId().GetMountpoint(); mp != "" {
			if fs, err := statFS(mp, now); err == nil {
				out.CapacityBytes, out.AvailableBytes = ptr(fs.capacity), ptr(fs.available)
				out.Inodes, out.InodesFree = ptr(fs.inodes), ptr(fs.inodesFree)
			} else {
				logger.V(2).Info("Reading the image filesystem failed", "mountpoint", mp, "err", err.Error())
			}
		}
		return out
	}
	rs := &statsapi.RuntimeStats{ImageFs: convert(resp.GetImageFilesystems()), ContainerFs: convert(resp.GetContainerFilesystems())}
	if rs.ContainerFs == nil {
		rs.ContainerFs = rs.ImageFs
	}
	return rs, nil
}

// maxPIDReuse is how long the kernel's process limits, read from two
// sysctl files, are used again (they change only when an administrator
// sets them).
const maxPIDReuse = time.Minute

func (p *Provider) rlimit(now time.Time) (*statsapi.RlimitStats, error) {
	maxPID, err := p.pidLimit.get(now, maxPIDReuse, false, p.proc.maxPID)
	if err != nil {
		return nil, err
	}
	procs, err := p.cfg.Processes()
	if err != nil {
		return nil, err
	}
	return &statsapi.RlimitStats{Time: metav1.NewTime(now), MaxPID: &maxPID, NumOfRunningProcesses: &procs}, nil
}
