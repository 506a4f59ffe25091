package qos

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// NodeOptions are the node's settings that shape container resources.
type NodeOptions struct {
	// CPUCFSQuota enforces cpu limits with a CFS quota (cpuCFSQuota).
	CPUCFSQuota bool
	// CPUCFSQuotaPeriod is the CFS period (cpuCFSQuotaPeriod); zero is 100ms.
	CPUCFSQuotaPeriod time.Duration
	// MemoryCapacity is the node's memory in bytes, for OOM scores.
	MemoryCapacity int64
	// HugePageSizes are the host's huge page sizes as the runtime names
	// them ("2MB", "1GB"); each gets a limit, zero unless asked for.
	HugePageSizes []string
	// OOMKillGroup asks the kernel to kill the whole container when one of
	// its processes runs it out of memory (cgroup v2 only: the opposite of
	// singleProcessOOMKill).
	OOMKillGroup bool
	// Swap is how containers may swap (memorySwap.swapBehavior).
	Swap SwapOptions
}

// ContainerResources is the Linux resources of container c of pod, as the
// runtime applies them to the container's cgroup: cpu shares from the
// request (the limit when no request is given), the CFS quota from the
// limit, the memory limit, the OOM score of the pod's class, a limit
// for every huge page size and the swap limit (swap.go). With pod-level
// resources, a container without a cpu or memory limit of its own gets
// the pod's.
func ContainerResources(pod *v1.Pod, c *v1.Container, opts NodeOptions) *runtimeapi.LinuxContainerResources {
	podLevel := resourcehelper.IsPodLevelResourcesSet(pod)
	cpuLimit := c.Resources.Limits.Cpu()
	memLimit := c.Resources.Limits.Memory()
	if podLevel {
		if cpuLimit.IsZero() {
			cpuLimit = pod.Spec.Resources.Limits.Cpu()
		}
		if memLimit.IsZero() {
			memLimit = pod.Spec.Resources.Limits.Memory()
		}
	}
	var cpuRequest *resource.Quantity
	if req, ok := c.Resources.Requests[v1.ResourceCPU]; ok {
		cpuRequest = &req
	}
	r := linuxResources(cpuRequest, cpuLimit, memLimit, opts)
	r.OomScoreAdj = OOMScoreAdj(pod, c, opts.MemoryCapacity)
	r.HugepageLimits = hugePageLimits(pod, c, opts.HugePageSizes, podLevel)
	if opts.OOMKillGroup {
		r.Unified = map[string]string{"memory.oom.group": "1"}
	}
	setSwap(r, pod, c, opts.MemoryCapacity, opts.Swap)
	return r
}

// SandboxResources is what the pod's containers ask for together (its
// overhead aside), the resources the runtime is told its sandbox is for.
func SandboxResources(pod *v1.Pod, opts NodeOptions) *runtimeapi.LinuxContainerResources {
	o := resourcehelper.PodResourcesOptions{ExcludeOverhead: true}
	reqs, limits := resourcehelper.PodRequests(pod, o), resourcehelper.PodLimits(pod, o)
	var cpuRequest *resource.Quantity
	if _, ok := reqs[v1.ResourceCPU]; ok {
		cpuRequest = reqs.Cpu()
	}
	return linuxResources(cpuRequest, limits.Cpu(), limits.Memory(), opts)
}

// OverheadResources is the pod's overhead (from its RuntimeClass), as
// requests equal to limits; empty without one.
func OverheadResources(pod *v1.Pod, opts NodeOptions) *runtimeapi.LinuxContainerResources {
	if pod.Spec.Overhead == nil {
		return &runtimeapi.LinuxContainerResources{}
	}
	cpu := pod.Spec.Overhead.Cpu()
	return linuxResources(cpu, cpu, pod.Spec.Overhead.Memory(), opts)
}

// linuxResources is cpu shares from the request (the limit when there is
// none), the CFS quota from the limit when quotas are enforced, and the
// memory limit.
func linuxResources(cpuRequest, cpuLimit, memLimit *resource.Quantity, opts NodeOptions) *runtimeapi.LinuxContainerResources {
	if cpuRequest == nil {
		cpuRequest = cpuLimit
	}
	r := &runtimeapi.LinuxContainerResources{
		CpuShares:          int64(MilliCPUToShares(cpuRequest.MilliValue())),
		MemoryLimitInBytes: memLimit.Value(),
	}
	if opts.CPUCFSQuota {
		r.CpuPeriod = PeriodMicros(opts.CPUCFSQuotaPeriod)
		r.CpuQuota = MilliCPUToQuota(cpuLimit.MilliValue(), r.CpuPeriod)
	}
	return r
}

// hugePageLimits gives every host page size a limit: what the container
// asks for, else what the pod asks for at pod level, else zero (no huge
// pages for a container that did not ask). Sizes the host lacks are left
// out, as the kubelet leaves them.
func hugePageLimits(pod *v1.Pod, c *v1.Container, sizes []string, podLevel bool) []*runtimeapi.HugepageLimit {
	want := map[string]uint64{}
	if podLevel {
		for name, q := range pod.Spec.Resources.Limits {
			if size, ok := HugePageSize(name); ok {
				want[size] = uint64(q.Value())
			}
		}
	}
	for name, q := range c.Resources.Limits {
		if size, ok := HugePageSize(name); ok {
			want[size] = uint64(q.Value())
		}
	}
	var out []*runtimeapi.HugepageLimit
	for _, size := range sizes {
		out = append(out, &runtimeapi.HugepageLimit{PageSize: size, Limit: want[size]})
	}
	return out
}

// HugePageSize turns a huge page resource name (hugepages-2Mi) into the
// page size as cgroups name it (2MB). ok is false for other resources
// and malformed sizes.
func HugePageSize(name v1.ResourceName) (string, bool) {
	s, ok := strings.CutPrefix(string(name), v1.ResourceHugePagesPrefix)
	if !ok {
		return "", false
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 {
		return "", false
	}
	return PageSizeName(q.Value())
}

// PageSizeName names a page size in bytes the way cgroups do: the largest
// binary unit that divides it (2097152 is 2MB, 1073741824 is 1GB).
func PageSizeName(bytes int64) (string, bool) {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for bytes >= 1024 && bytes%1024 == 0 && i < len(units)-1 {
		bytes /= 1024
		i++
	}
	if i == 0 {
		return "", false
	}
	return fmt.Sprintf("%d%s", bytes, units[i]), true
}
