// Package stats measures what the node and its pods use, in the shape of
// the kubelet's Summary API (k8s.io/kubelet/pkg/apis/stats/v1alpha1) that
// metrics-server, kubectl top and the eviction tooling read.
//
// The node's CPU and memory come from the root cgroup and /proc (cgroup
// v1 or v2), its filesystems from statfs of the root directory and the
// runtime's image filesystem (CRI ImageFsInfo). Pods and containers come
// from CRI (ListPodSandboxStats, or ListContainerStats plus the pod
// cgroup when the runtime lacks sandbox stats), their volumes and logs
// from walking their directories. CPU rates (usageNanoCores) are measured
// between readings at least a second apart; a housekeeping loop keeps a
// recent reading of every cgroup, so that the first request has a rate.
// Containers' rates come from the runtime (containerd gives them), else
// from the readings of successive requests.
package stats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	agentmetrics "github.com/nodeagent/nodeagent/pkg/metrics"
)

// Defaults applied by New.
const (
	DefaultCgroupMount          = "/sys/fs/cgroup"
	DefaultProcRoot             = "/proc"
	DefaultSysRoot              = "/sys"
	DefaultHousekeepingInterval = 10 * time.Second
	DefaultVolumeStatsPeriod    = time.Minute
	// minRateWindow is the shortest span a CPU rate is measured over.
	minRateWindow = time.Second
	// forgetRatesAfter drops CPU baselines of what is no longer read.
	forgetRatesAfter = 10 * time.Minute
)

// Runtime is the part of the CRI runtime service the stats come from; a
// runtimeapi.RuntimeServiceClient satisfies it.
type Runtime interface {
	ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ListPodSandboxStats(ctx context.Context, in *runtimeapi.ListPodSandboxStatsRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxStatsResponse, error)
	ListContainerStats(ctx context.Context, in *runtimeapi.ListContainerStatsRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainerStatsResponse, error)
}

// Images reports the runtime's image filesystem; a
// runtimeapi.ImageServiceClient satisfies it.
type Images interface {
	ImageFsInfo(ctx context.Context, in *runtimeapi.ImageFsInfoRequest, opts ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error)
}

var (
	_ Runtime = runtimeapi.RuntimeServiceClient(nil)
	_ Images  = runtimeapi.ImageServiceClient(nil)
)

// Metrics records how long measuring volumes takes.
type Metrics interface {
	// ObserveVolumeMetricCollection records one measurement of a volume's
	// usage by where its figures came from ("du" for a walk of its
	// directory).
	ObserveVolumeMetricCollection(source string, d time.Duration)
}

var _ Metrics = (*agentmetrics.Metrics)(nil)

// noMetrics records nothing.
type noMetrics struct{}

func (noMetrics) ObserveVolumeMetricCollection(string, time.Duration) {}

// VolumeDir is one volume of a pod as it lies on disk.
type VolumeDir struct {
	// Name is the volume's name in the pod spec.
	Name string
	// Plugin is the kubelet's plugin name ("kubernetes.io/empty-dir"): it
	// decides whether the volume counts as the pod's ephemeral storage.
	Plugin string
	// Path is the volume's directory.
	Path string
	// Usage, when set, reports the volume's usage (a CSI driver's
	// NodeGetVolumeStats) instead of a walk of Path.
	Usage func(ctx context.Context) (*statsapi.FsStats, error)
}

// SystemCgroups are the cgroups reported as the node's system containers,
// as paths below the cgroup mount; empty ones (and "/") are left out.
type SystemCgroups struct {
	// Agent is the agent's own cgroup (kubeletCgroups, or the one it runs in).
	Agent string
	// Runtime is the container runtime's (runtimeCgroups, or the one the
	// runtime's process runs in).
	Runtime string
	// Pods is the kubepods cgroup.
	Pods string
}

// Config configures a Provider.
type Config struct {
	// NodeName names the node in the summary. Required.
	NodeName string
	// Runtime and Images are the CRI services. Required.
	Runtime Runtime
	Images  Images
	// Pods lists the pods the agent runs: their volumes are measured and
	// their cgroups read. Required.
	Pods func() []*v1.Pod
	// PodCgroup names a pod's cgroup below the mount; nil when pods have
	// no cgroup of their own (cgroupsPerQOS off).
	PodCgroup func(*v1.Pod) (string, error)
	// VolumeDirs lists a pod's volume directories; nil measures none.
	VolumeDirs func(*v1.Pod) []VolumeDir
	// RootDir is the agent's root directory (rootDir): its filesystem is
	// the node's fs; pods/<uid>/etc-hosts counts for pods.
	RootDir string
	// PodLogsDir holds the pods' log directories (podLogsDir).
	PodLogsDir string
	// SystemCgroups are reported as system containers. An empty Agent is
	// the cgroup the agent runs in; an empty Runtime is the one RuntimePID
	// runs in, when it is known.
	SystemCgroups SystemCgroups
	// RuntimePID is the runtime's process; 0 when unknown.
	RuntimePID int
	// StartTime is when the agent started: the kubelet system
	// container's start time.
	StartTime time.Time
	// CgroupMount is where the cgroup filesystems are mounted; empty is
	// DefaultCgroupMount.
	CgroupMount string
	// Unified says whether CgroupMount is cgroup v2; nil detects it.
	Unified *bool
	// ProcRoot is the host's /proc; empty is DefaultProcRoot.
	ProcRoot string
	// SysRoot is the host's /sys (block device names, the system UUID);
	// empty is DefaultSysRoot.
	SysRoot string
	// HousekeepingInterval is how often Run reads every cgroup; zero is
	// DefaultHousekeepingInterval.
	HousekeepingInterval time.Duration
	// VolumeStatsPeriod is how often a pod's volumes are measured again
	// (volumeStatsAggPeriod); zero is DefaultVolumeStatsPeriod.
	VolumeStatsPeriod time.Duration
	// Metrics records the volumes' measurements; nil records nothing.
	Metrics Metrics
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Processes counts the machine's processes and threads, for rlimit;
	// nil uses sysinfo(2).
	Processes func() (int64, error)
}

// Provider computes summaries. It is safe for concurrent use.
type Provider struct {
	cfg      Config
	cgroups  cgroupReader
	proc     procFS
	rates    *cpuRates
	volumes  *volumeCache
	bootTime time.Time
	memTotal uint64
	// unreadable holds the system containers (by name) whose cgroup's
	// last read failed, so that the failure is logged once at level 2.
	unreadable sync.Map
	// fsInfo is the runtime's last ImageFsInfo answer, for the eviction
	// signals' reuse (imageFsInfoReuse); pidLimit the kernel's process
	// limit as last read (maxPIDReuse).
	fsInfo   reused[*runtimeapi.ImageFsInfoResponse]
	pidLimit reused[int64]
}

// New validates cfg, fills defaults and reads what does not change: the
// boot time and the machine's memory.
func New(cfg Config) (*Provider, error) {
	if cfg.NodeName == "" || cfg.Runtime == nil || cfg.Images == nil || cfg.Pods == nil {
		return nil, errors.New("stats: NodeName, Runtime, Images and Pods are required")
	}
	if cfg.CgroupMount == "" {
		cfg.CgroupMount = DefaultCgroupMount
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = DefaultProcRoot
	}
	if cfg.Unified == nil {
		unified := false
		if cfg.CgroupMount == DefaultCgroupMount {
			unified = occgroups.IsCgroup2UnifiedMode()
		} else {
			_, err := os.Stat(filepath.Join(cfg.CgroupMount, "cgroup.controllers"))
			unified = err == nil
		}
		cfg.Unified = &unified
	}
	if cfg.HousekeepingInterval <= 0 {
		cfg.HousekeepingInterval = DefaultHousekeepingInterval
	}
	if cfg.VolumeStatsPeriod <= 0 {
		cfg.VolumeStatsPeriod = DefaultVolumeStatsPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Processes == nil {
		cfg.Processes = sysinfoProcs
	}
	proc := procFS{root: cfg.ProcRoot}
	boot, err := proc.bootTime()
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	mi, err := proc.meminfo()
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if cfg.SystemCgroups.Agent == "" {
		cfg.SystemCgroups.Agent = proc.cgroupOf("self", *cfg.Unified)
	}
	if cfg.SystemCgroups.Runtime == "" && cfg.RuntimePID > 0 {
		cfg.SystemCgroups.Runtime = proc.cgroupOf(strconv.Itoa(cfg.RuntimePID), *cfg.Unified)
	}
	return &Provider{
		cfg:      cfg,
		cgroups:  cgroupReader{mount: cfg.CgroupMount, unified: *cfg.Unified, proc: proc},
		proc:     proc,
		rates:    newCPURates(minRateWindow, forgetRatesAfter),
		volumes:  newVolumeCache(),
		bootTime: boot,
		memTotal: mi["MemTotal"],
	}, nil
}

func sysinfoProcs() (int64, error) {
	var info unix.Sysinfo_t
	if err := unix.Sysinfo(&info); err != nil {
		return 0, fmt.Errorf("sysinfo: %w", err)
	}
	return int64(info.Procs), nil
}

// Run reads every cgroup now and then, so that CPU rates have a recent
// baseline, and measures the pods' volumes every VolumeStatsPeriod, until
// ctx ends.
func (p *Provider) Run(ctx context.Context) error {
	t := p.cfg.Clock.NewTicker(p.cfg.HousekeepingInterval)
	defer t.Stop()
	for {
		p.housekeep(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// housekeep reads the cgroups whose CPU rates no Summary has read in the
// last interval (less a tenth, for the tickers' drift): the eviction
// manager asks for a Summary every 10 s, the housekeeping's period, and it
// reads the same files.
func (p *Provider) housekeep(ctx context.Context) {
	logger := klog.FromContext(ctx)
	now := p.cfg.Clock.Now()
	recent := now.Add(-p.cfg.HousekeepingInterval * 9 / 10)
	if !p.rates.seenSince(rootKey, recent) {
		if cpu, err := p.cgroups.readCPU("/"); err == nil {
			p.rates.observe(rootKey, now, cpu)
		} else {
			logger.V(2).Info("Reading the root cgroup failed", "err", err.Error())
		}
	}
	for _, sc := range p.systemContainers() {
		if p.rates.seenSince(cgroupKey(sc.cgroup), recent) {
			continue
		}
		if cpu, err := p.cgroups.readCPU(sc.cgroup); err == nil {
			p.rates.observe(cgroupKey(sc.cgroup), now, cpu)
		}
	}
	pods := p.cfg.Pods()
	if p.cfg.PodCgroup != nil {
		for _, pod := range pods {
			path, err := p.cfg.PodCgroup(pod)
			if err != nil || p.rates.seenSince(cgroupKey(path), recent) {
				continue
			}
			if cpu, err := p.cgroups.readCPU(path); err == nil {
				p.rates.observe(cgroupKey(path), now, cpu)
			}
		}
	}
	p.volumes.refresh(ctx, pods, p.cfg.VolumeDirs, p.cfg.VolumeStatsPeriod, p.cfg.Clock, p.cfg.Metrics)
	p.rates.forget(now)
}

// NodeSummary is a Summary of the node alone (its memory, the pods'
// cgroup, its filesystems and the runtime's, its process limits; not its
// network nor the agent's and runtime's cgroups) and no pod: what the
// eviction manager's signals read, at a cost that does not grow with the
// pods (a Summary lists and reads every pod and container, and asks the
// runtime for their stats).
func (p *Provider) NodeSummary(ctx context.Context) (*statsapi.Summary, error) {
	node, err := p.nodeStats(ctx, nodeSignals)
	if err != nil {
		return nil, err
	}
	return &statsapi.Summary{Node: node}, nil
}

// Summary is what /stats/summary answers; with onlyCPUAndMemory, what
// /stats/summary?only_cpu_and_memory=true and /metrics/resource need:
// CPU and memory of the node, its system containers, pods and containers.
func (p *Provider) Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error) {
	full := !onlyCPUAndMemory
	view := nodeFull
	if onlyCPUAndMemory {
		view = nodeCPUAndMemory
	}
	node, err := p.nodeStats(ctx, view)
	if err != nil {
		return nil, err
	}
	pods, err := p.podStats(ctx, full)
	if err != nil {
		return nil, err
	}
	return &statsapi.Summary{Node: node, Pods: pods}, nil
}
