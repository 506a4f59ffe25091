package stats

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// CgroupStats is one cgroup as cAdvisor shows it to /metrics/cadvisor:
// the root (the machine), a pod's cgroup or a container's. Values the
// agent could not read are nil or empty, and left out of the metrics.
type CgroupStats struct {
	// Cgroup is the path below the hierarchy's mount ("/" for the root);
	// the id label. For a container whose cgroup was not found it is the
	// pod's cgroup joined with the container's ID.
	Cgroup string
	// ContainerID is the runtime's ID of the container (the name label);
	// empty for the root and pods.
	ContainerID string
	// Image is the container's image as the runtime reports it.
	Image string
	// Namespace and Pod name the pod; Container the container in it. All
	// empty for the root, Container empty for a pod's own cgroup.
	Namespace, Pod, Container string
	// StartTime is when the container, or cgroup, was created.
	StartTime time.Time
	// Time is when the usage was read.
	Time time.Time

	// CPUNanoseconds is the cumulative CPU time.
	CPUNanoseconds *uint64
	CFS            *CFSStats
	CPUSpec        *CPUSpec
	Memory         *CgroupMemory
	// OOMKills counts the processes the kernel killed for want of memory
	// in the cgroup, where the kernel keeps the count.
	OOMKills    *uint64
	Filesystems []FsUsage
	DiskIO      []DiskIO
	Network     []InterfaceCounters
}

// CFSStats are the CFS bandwidth counters of a cgroup.
type CFSStats struct {
	Periods, ThrottledPeriods, ThrottledNanoseconds uint64
}

// CPUSpec is a cgroup's CPU settings as cAdvisor reports them: the quota
// (0 when there is none) and period in microseconds, and the v1 shares
// (converted from cpu.weight on v2).
type CPUSpec struct {
	Quota, Period, Shares uint64
}

// CgroupMemory is a cgroup's memory in bytes.
type CgroupMemory struct {
	Usage, WorkingSet, RSS *uint64
	// Cache is the page cache; MaxUsage the peak usage (where the kernel
	// keeps it).
	Cache, MaxUsage *uint64
	// Limit is the memory limit; 0 means none (the root, or unlimited).
	Limit *uint64
}

// FsUsage is a container's usage of one filesystem.
type FsUsage struct {
	// Device is the filesystem's device (/dev/sda1, overlay...); empty
	// when it could not be found.
	Device string
	// Usage is what the container takes; Limit the filesystem's capacity.
	Usage, Limit       uint64
	Inodes, InodesFree uint64
}

// DiskIO is the bytes a cgroup read from and wrote to one block device.
type DiskIO struct {
	// MajorMinor is the device's number ("8:0"); Device its name
	// (/dev/sda) when sysfs has it.
	MajorMinor, Device    string
	ReadBytes, WriteBytes uint64
}

// InterfaceCounters are one network interface's counters.
type InterfaceCounters struct {
	Name                                    string
	RxBytes, RxPackets, RxErrors, RxDropped uint64
	TxBytes, TxPackets, TxErrors, TxDropped uint64
}

// MachineInfo is what cAdvisor's machine metrics say of the node.
type MachineInfo struct {
	MachineID, SystemUUID, BootID string
	// CPUCores is the number of logical CPUs; MemoryBytes the memory
	// installed (MemTotal).
	CPUCores    int
	MemoryBytes uint64
}

// Machine describes the node as cAdvisor's machine metrics do.
func (p *Provider) Machine() MachineInfo {
	read := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(data))
	}
	m := MachineInfo{
		MachineID:   read("/etc/machine-id"),
		SystemUUID:  read(filepath.Join(p.sysRoot(), "class", "dmi", "id", "product_uuid")),
		BootID:      read(filepath.Join(p.cfg.ProcRoot, "sys", "kernel", "random", "boot_id")),
		CPUCores:    p.cpuCores(),
		MemoryBytes: p.memTotal,
	}
	return m
}

// cpuCores counts the processors /proc/cpuinfo lists, else the CPUs Go
// may use.
func (p *Provider) cpuCores() int {
	data, err := p.proc.read("cpuinfo")
	n := 0
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, _, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "processor" {
				n++
			}
		}
	}
	if n == 0 {
		n = runtime.NumCPU()
	}
	return n
}

func (p *Provider) sysRoot() string {
	if p.cfg.SysRoot == "" {
		return DefaultSysRoot
	}
	return p.cfg.SysRoot
}

// CgroupStats lists the cgroups /metrics/cadvisor reports: the root, then
// per ready pod its own cgroup and its running containers. The root must
// be readable; anything else that cannot be read is left out.
func (p *Provider) CgroupStats(ctx context.Context) ([]CgroupStats, error) {
	logger := klog.FromContext(ctx)
	now := p.cfg.Clock.Now()
	devices := newDeviceNames(p.sysRoot())
	mounts := newMountTable(ctx)
	root, err := p.rootCgroupStats(ctx, now, devices, mounts)
	if err != nil {
		return nil, err
	}
	out := []CgroupStats{root}
	rp, err := p.listRuntimePods(ctx)
	if err != nil {
		return nil, err
	}
	specs := map[types.UID]*v1.Pod{}
	for _, pod := range p.cfg.Pods() {
		specs[pod.UID] = pod
	}
	for _, sb := range rp.sandboxes {
		md := sb.GetMetadata()
		spec := specs[types.UID(md.GetUid())]
		podCg := ""
		if spec != nil && p.cfg.PodCgroup != nil {
			if path, err := p.cfg.PodCgroup(spec); err == nil {
				podCg = filepath.Clean("/" + path)
			}
		}
		pod := CgroupStats{Namespace: md.GetNamespace(), Pod: md.GetName(), Cgroup: podCg, Time: now,
			StartTime: time.Unix(0, sb.GetCreatedAt())}
		if podCg != "" {
			if u, err := p.cgroups.read(podCg); err == nil {
				pod.fromUsage(u, p.cgroups.readDetail(podCg), devices)
			} else {
				logger.V(4).Info("Reading a pod's cgroup failed", "pod", klog.KRef(md.GetNamespace(), md.GetName()), "err", err.Error())
			}
		}
		sbStat := rp.bySandbox[sb.GetId()]
		if pod.CPUNanoseconds == nil {
			pod.fromCRISandbox(sbStat)
		}
		pod.Network = p.podNetwork(podCg, sbStat)
		if pod.Cgroup == "" {
			// Without a cgroup of its own the pod is known by its sandbox.
			pod.Cgroup = "/" + sb.GetId()
		}
		out = append(out, pod)

		var containers []CgroupStats
		for _, cs := range rp.containersBySandbox[sb.GetId()] {
			c, ok := rp.running[cs.GetAttributes().GetId()]
			if !ok {
				continue
			}
			containers = append(containers, p.containerCgroupStats(now, cs, c, md, podCg, devices, mounts))
		}
		sort.Slice(containers, func(i, j int) bool { return containers[i].Container < containers[j].Container })
		out = append(out, containers...)
	}
	return out, nil
}

// rootCgroupStats is the machine: the root cgroup, the host's network and
// the node's and the runtime's filesystems.
func (p *Provider) rootCgroupStats(ctx context.Context, now time.Time, devices *deviceNames, mounts *mountTable) (CgroupStats, error) {
	u, err := p.cgroups.read("/")
	if err != nil {
		return CgroupStats{}, err
	}
	root := CgroupStats{Cgroup: "/", StartTime: p.bootTime, Time: now}
	root.fromUsage(u, p.cgroups.readDetail("/"), devices)
	root.Memory.Limit = nil
	if ifaces, err := p.proc.netDev("self"); err == nil {
		root.Network = countersOf(ifaces)
	}
	seen := map[string]bool{}
	addFs := func(path string) {
		fs, err := statFS(path, now)
		if err != nil {
			return
		}
		dev := mounts.deviceOf(path)
		if seen[dev] {
			return
		}
		seen[dev] = true
		root.Filesystems = append(root.Filesystems, FsUsage{Device: dev, Usage: fs.used, Limit: fs.capacity, Inodes: fs.inodes, InodesFree: fs.inodesFree})
	}
	if p.cfg.RootDir != "" {
		addFs(p.cfg.RootDir)
	}
	resp, err := p.cfg.Images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Asking the runtime for its image filesystem failed", "err", err.Error())
	}
	for _, fs := range append(resp.GetImageFilesystems(), resp.GetContainerFilesystems()...) {
		if mp := fs.GetFsId().GetMountpoint(); mp != "" {
			addFs(mp)
		}
	}
	return root, nil
}

// fromUsage fills CPU, memory, CFS, settings, OOM kills and block I/O
// from a cgroup's files.
func (s *CgroupStats) fromUsage(u cgroupUsage, d cgroupDetail, devices *deviceNames) {
	s.CPUNanoseconds = ptr(u.cpu)
	s.Memory = &CgroupMemory{Usage: ptr(u.memUsage), WorkingSet: ptr(u.workingSet), RSS: ptr(u.rss)}
	s.addDetail(d, devices)
	if s.StartTime.IsZero() {
		s.StartTime = u.created
	}
}

func (s *CgroupStats) addDetail(d cgroupDetail, devices *deviceNames) {
	s.CFS, s.CPUSpec, s.OOMKills = d.cfs, d.cpuSpec, d.oomKills
	if s.Memory == nil {
		s.Memory = &CgroupMemory{}
	}
	s.Memory.Cache, s.Memory.MaxUsage, s.Memory.Limit = d.cache, d.maxUsage, d.memLimit
	if s.Memory.Limit != nil && *s.Memory.Limit >= unlimitedMemory {
		s.Memory.Limit = ptr[uint64](0)
	}
	for _, io := range d.io {
		io.Device = devices.name(io.MajorMinor)
		s.DiskIO = append(s.DiskIO, io)
	}
}

// fromCRISandbox fills a pod's CPU and memory from the runtime's sandbox
// stats, for a pod whose cgroup cannot be read.
func (s *CgroupStats) fromCRISandbox(st *runtimeapi.PodSandboxStats) {
	l := st.GetLinux()
	if v := l.GetCpu().GetUsageCoreNanoSeconds(); v != nil {
		s.CPUNanoseconds = ptr(v.GetValue())
	}
	if m := l.GetMemory(); m != nil {
		s.Memory = criCgroupMemory(m)
	}
}

func criCgroupMemory(m *runtimeapi.MemoryUsage) *CgroupMemory {
	val := func(v *runtimeapi.UInt64Value) *uint64 {
		if v == nil {
			return nil
		}
		return ptr(v.GetValue())
	}
	return &CgroupMemory{Usage: val(m.GetUsageBytes()), WorkingSet: val(m.GetWorkingSetBytes()), RSS: val(m.GetRssBytes())}
}

// containerCgroupStats is one running container: CPU, memory and its
// writable layer from the runtime's stats, the rest from its cgroup,
// found below the pod's by the container's ID.
func (p *Provider) containerCgroupStats(now time.Time, cs *runtimeapi.ContainerStats, c *runtimeapi.Container, md *runtimeapi.PodSandboxMetadata,
	podCg string, devices *deviceNames, mounts *mountTable) CgroupStats {
	name := c.GetLabels()[labelContainerName]
	if name == "" {
		name = cs.GetAttributes().GetMetadata().GetName()
	}
	out := CgroupStats{
		ContainerID: c.GetId(),
		Image:       containerImage(c),
		Namespace:   md.GetNamespace(),
		Pod:         md.GetName(),
		Container:   name,
		StartTime:   time.Unix(0, c.GetCreatedAt()),
		Time:        now,
	}
	if v := cs.GetCpu().GetUsageCoreNanoSeconds(); v != nil {
		out.CPUNanoseconds = ptr(v.GetValue())
		out.Time = stamp(cs.GetCpu().GetTimestamp(), now).Time
	}
	if m := cs.GetMemory(); m != nil {
		out.Memory = criCgroupMemory(m)
	}
	cg := p.cgroups.childNamed(podCg, c.GetId())
	if cg != "" {
		out.Cgroup = cg
		if out.CPUNanoseconds == nil {
			if u, err := p.cgroups.read(cg); err == nil {
				out.fromUsage(u, cgroupDetail{}, devices)
			}
		}
		out.addDetail(p.cgroups.readDetail(cg), devices)
	} else {
		out.Cgroup = filepath.Join("/", podCg, c.GetId())
	}
	if wl := cs.GetWritableLayer(); wl != nil {
		fu := FsUsage{Usage: wl.GetUsedBytes().GetValue()}
		if mp := wl.GetFsId().GetMountpoint(); mp != "" {
			fu.Device = mounts.deviceOf(mp)
			if fs, err := statFS(mp, now); err == nil {
				fu.Limit, fu.Inodes, fu.InodesFree = fs.capacity, fs.inodes, fs.inodesFree
			}
		}
		out.Filesystems = []FsUsage{fu}
	}
	return out
}

// containerImage is the image as the pod spec names it when the runtime
// kept that, else as the runtime resolved it.
func containerImage(c *runtimeapi.Container) string {
	for _, img := range []string{c.GetImage().GetUserSpecifiedImage(), c.GetImage().GetImage(), c.GetImageRef()} {
		if img != "" {
			return img
		}
	}
	return ""
}

// podNetwork reads the counters of the pod's network namespace through a
// process in its cgroup, as cAdvisor does; without one, the runtime's
// (which has no packet counts).
func (p *Provider) podNetwork(podCg string, st *runtimeapi.PodSandboxStats) []InterfaceCounters {
	if podCg != "" {
		if pid := p.cgroups.firstPID(podCg); pid > 0 {
			if ifaces, err := p.proc.netDev(strconv.Itoa(pid)); err == nil {
				return countersOf(ifaces)
			}
		}
	}
	n := st.GetLinux().GetNetwork()
	if n == nil {
		return nil
	}
	var out []InterfaceCounters
	for _, i := range n.GetInterfaces() {
		out = append(out, InterfaceCounters{
			Name:    i.GetName(),
			RxBytes: i.GetRxBytes().GetValue(), RxErrors: i.GetRxErrors().GetValue(),
			TxBytes: i.GetTxBytes().GetValue(), TxErrors: i.GetTxErrors().GetValue(),
		})
	}
	if len(out) == 0 && n.GetDefaultInterface() != nil {
		i := n.GetDefaultInterface()
		out = append(out, InterfaceCounters{
			Name:    i.GetName(),
			RxBytes: i.GetRxBytes().GetValue(), RxErrors: i.GetRxErrors().GetValue(),
			TxBytes: i.GetTxBytes().GetValue(), TxErrors: i.GetTxErrors().GetValue(),
		})
	}
	return out
}

// countersOf keeps the interfaces cAdvisor reports (not loopback, not the
// host ends of veth pairs).
func countersOf(ifaces []interfaceCounters) []InterfaceCounters {
	var out []InterfaceCounters
	for _, c := range ifaces {
		if ignoredInterface(c.name) {
			continue
		}
		out = append(out, InterfaceCounters{
			Name:    c.name,
			RxBytes: c.rxBytes, RxPackets: c.rxPackets, RxErrors: c.rxErrors, RxDropped: c.rxDropped,
			TxBytes: c.txBytes, TxPackets: c.txPackets, TxErrors: c.txErrs, TxDropped: c.txDropped,
		})
	}
	return out
}

// deviceNames caches block device names for one scrape.
type deviceNames struct {
	sysRoot string
	names   map[string]string
}

func newDeviceNames(sysRoot string) *deviceNames {
	return &deviceNames{sysRoot: sysRoot, names: map[string]string{}}
}

// name is /dev/<name> of MAJ:MIN, or MAJ:MIN itself when sysfs has no name.
func (d *deviceNames) name(majorMinor string) string {
	if n, ok := d.names[majorMinor]; ok {
		return n
	}
	n, err := blockDeviceName(d.sysRoot, majorMinor)
	if err != nil {
		n = majorMinor
	}
	d.names[majorMinor] = n
	return n
}

// mountTable finds the device a path's filesystem is mounted from.
type mountTable struct {
	mounts []*mountinfo.Info
}

func newMountTable(ctx context.Context) *mountTable {
	ms, err := mountinfo.GetMounts(nil)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Reading the mount table failed", "err", err.Error())
	}
	return &mountTable{mounts: ms}
}

// deviceOf is the source of the mount holding path (the longest mount
// point above it), or "" when none is known.
func (m *mountTable) deviceOf(path string) string {
	path = filepath.Clean(path)
	best, dev := -1, ""
	for _, mi := range m.mounts {
		mp := mi.Mountpoint
		if mp != "/" && path != mp && !strings.HasPrefix(path, mp+"/") {
			continue
		}
		if len(mp) >= best {
			best, dev = len(mp), mi.Source
		}
	}
	return dev
}
