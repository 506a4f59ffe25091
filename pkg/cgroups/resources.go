package cgroups

import (
	"time"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodeagent/nodeagent/pkg/qos"
)

// Resources are the limits written to one cgroup. A nil field is left
// as it is (unlimited in a new cgroup).
type Resources struct {
	// CPUShares is cpu.shares (v1), converted to cpu.weight on v2.
	CPUShares *uint64
	// CPUQuota and CPUPeriod are the CFS bandwidth in microseconds; a
	// quota of -1 is unlimited.
	CPUQuota  *int64
	CPUPeriod *uint64
	// Memory is the memory limit in bytes.
	Memory *int64
	// PidsLimit is the most processes the cgroup may hold.
	PidsLimit *int64
	// HugePages maps a page size ("2MB") to a limit in bytes.
	HugePages map[string]int64
}

// PodOptions are the node settings that shape pod cgroups.
type PodOptions struct {
	// CPUCFSQuota enforces cpu limits with a CFS quota (cpuCFSQuota).
	CPUCFSQuota bool
	// CPUCFSQuotaPeriod is cpuCFSQuotaPeriod; zero is 100ms.
	CPUCFSQuotaPeriod time.Duration
	// PodPidsLimit is podPidsLimit; zero or negative is no limit.
	PodPidsLimit int64
}

func ptrTo[T any](v T) *T { return &v }

// PodResources is what a pod's cgroup is limited to, from the sum of its
// containers' requests and limits (pod-level ones when set), as the
// kubelet sets it: cpu shares from requests for every class (the minimum
// for BestEffort); a CFS quota and a memory limit for Guaranteed pods,
// and for Burstable pods whose every container declares that limit;
// huge page limits as requested; the pod pids limit.
func PodResources(pod *v1.Pod, opts PodOptions) Resources {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	cpuDeclared, memDeclared := true, true
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Resources.Limits.Cpu().IsZero() {
				cpuDeclared = false
			}
			if list[i].Resources.Limits.Memory().IsZero() {
				memDeclared = false
			}
		}
	}
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		cpuDeclared = cpuDeclared || !pod.Spec.Resources.Limits.Cpu().IsZero()
		memDeclared = memDeclared || !pod.Spec.Resources.Limits.Memory().IsZero()
	}

	period := uint64(qos.PeriodMicros(opts.CPUCFSQuotaPeriod))
	quota := qos.MilliCPUToQuota(limits.Cpu().MilliValue(), int64(period))
	if !opts.CPUCFSQuota || quota == 0 {
		quota = -1
	}
	shares := qos.MilliCPUToShares(reqs.Cpu().MilliValue())
	var r Resources
	switch qos.Class(pod) {
	case v1.PodQOSGuaranteed:
		r.CPUShares, r.CPUQuota, r.CPUPeriod = &shares, &quota, &period
		r.Memory = ptrTo(limits.Memory().Value())
	case v1.PodQOSBurstable:
		r.CPUShares = &shares
		if cpuDeclared {
			r.CPUQuota, r.CPUPeriod = &quota, &period
		}
		if memDeclared {
			r.Memory = ptrTo(limits.Memory().Value())
		}
	default:
		r.CPUShares = ptrTo(uint64(qos.MinShares))
	}
	for res, q := range reqs {
		if size, ok := qos.HugePageSize(res); ok {
			if r.HugePages == nil {
				r.HugePages = map[string]int64{}
			}
			r.HugePages[size] += q.Value()
		}
	}
	if opts.PodPidsLimit > 0 {
		r.PidsLimit = ptrTo(opts.PodPidsLimit)
	}
	return r
}

// NodeResources is what the kubepods cgroup is limited to: the cpu shares
// and memory of the list given (allocatable when enforceNodeAllocatable
// has "pods", capacity otherwise), and its pid count when it has one.
func NodeResources(limit v1.ResourceList) Resources {
	var r Resources
	if q, ok := limit[v1.ResourceCPU]; ok {
		r.CPUShares = ptrTo(qos.MilliCPUToShares(q.MilliValue()))
	}
	if q, ok := limit[v1.ResourceMemory]; ok {
		r.Memory = ptrTo(q.Value())
	}
	if q, ok := limit["pid"]; ok {
		r.PidsLimit = ptrTo(q.Value())
	}
	for res, q := range limit {
		if size, ok := qos.HugePageSize(res); ok {
			if r.HugePages == nil {
				r.HugePages = map[string]int64{}
			}
			r.HugePages[size] = q.Value()
		}
	}
	return r
}

// burstableShares is the burstable QoS cgroup's cpu.shares: the sum of
// the cpu requests of the Burstable pods, so that together they weigh
// against the Guaranteed pods as much as they asked for.
func burstableShares(milliCPU []int64) uint64 {
	var sum int64
	for _, m := range milliCPU {
		sum += m
	}
	return qos.MilliCPUToShares(sum)
}

// widened is what to write to a cgroup limited by old on the way to new
// without lowering anything: each cpu and memory limit the larger of the
// two (unlimited beats any number; a limit old leaves unset stays
// unset), the rest as new has it.
func widened(old, new Resources) Resources {
	out := new
	if old.CPUShares != nil && new.CPUShares != nil && *old.CPUShares > *new.CPUShares {
		out.CPUShares = old.CPUShares
	}
	out.CPUQuota = widerLimit(old.CPUQuota, new.CPUQuota)
	if out.CPUQuota == nil {
		out.CPUPeriod = nil
	}
	out.Memory = widerLimit(old.Memory, new.Memory)
	return out
}

// widerLimit is the looser of two limits where zero or less is none.
func widerLimit(old, new *int64) *int64 {
	switch {
	case old == nil || new == nil:
		return nil // old unset: the cgroup has no limit yet; new unset: left as is
	case *old <= 0:
		return old
	case *new <= 0 || *new > *old:
		return new
	}
	return old
}
