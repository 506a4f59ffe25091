package qos

import (
	"strconv"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Swap behaviours (memorySwap.swapBehavior), as the kubelet spells them.
const (
	// NoSwap: containers may not swap (the default, also for "").
	NoSwap = "NoSwap"
	// LimitedSwap: a Burstable container may swap in proportion to the
	// memory it requests (cgroup v2 only).
	LimitedSwap = "LimitedSwap"
)

// cgroup2MaxSwap is the cgroup v2 file holding a cgroup's swap limit.
const cgroup2MaxSwap = "memory.swap.max"

// SwapOptions are the node's swap facts and behaviour. The host is read
// by the caller, so the decision below stays pure.
type SwapOptions struct {
	// Behavior is memorySwap.swapBehavior: NoSwap (or "") or LimitedSwap.
	Behavior string
	// Controller says whether the host can limit a cgroup's swap: the
	// memory.memsw files on cgroup v1, memory.swap.max on v2. Without it
	// the containers' swap is left alone.
	Controller bool
	// Unified says the host runs cgroup v2.
	Unified bool
	// Capacity is the node's swap in bytes (SwapTotal).
	Capacity int64
}

// containerSwapBehavior is the behaviour container c of pod gets, as the
// kubelet decides it: LimitedSwap only on cgroup v2 with a swap controller,
// for a container of a Burstable pod that is not critical (static, mirror,
// or of a system-critical priority) and that asks for memory with a request
// other than its limit. Everything else gets NoSwap.
func containerSwapBehavior(pod *v1.Pod, c *v1.Container, opts SwapOptions) string {
	if opts.Behavior != LimitedSwap || !opts.Controller || !opts.Unified || isCritical(pod) {
		return NoSwap
	}
	req, limit := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	if Class(pod) != v1.PodQOSBurstable || (req.IsZero() && limit.IsZero()) || req.Cmp(*limit) == 0 {
		return NoSwap
	}
	return LimitedSwap
}

// setSwap sets the swap limit of container c's resources r (whose memory
// limit is already set). NoSwap on cgroup v1 makes memory+swap equal to
// the memory limit (a zero limit leaves both unlimited), on cgroup v2
// memory.swap.max 0. LimitedSwap gives the container the share of the
// node's swap that its memory request is of the node's memory; a request
// that cannot be shared out (no memory capacity known, or a request above
// it) gets no swap.
func setSwap(r *runtimeapi.LinuxContainerResources, pod *v1.Pod, c *v1.Container, memoryCapacity int64, opts SwapOptions) {
	if !opts.Controller {
		return
	}
	swap := int64(0)
	if containerSwapBehavior(pod, c, opts) == LimitedSwap {
		if s, ok := limitedSwap(c.Resources.Requests.Memory().Value(), memoryCapacity, opts.Capacity); ok {
			swap = s
		}
	}
	if !opts.Unified {
		r.MemorySwapLimitInBytes = r.MemoryLimitInBytes
		return
	}
	if r.Unified == nil {
		r.Unified = map[string]string{}
	}
	r.Unified[cgroup2MaxSwap] = strconv.FormatInt(swap, 10)
}

// limitedSwap is request/memoryCapacity of swapCapacity; ok is false when
// the share cannot be computed.
func limitedSwap(request, memoryCapacity, swapCapacity int64) (int64, bool) {
	if memoryCapacity <= 0 || request > memoryCapacity {
		return 0, false
	}
	return int64(float64(request) / float64(memoryCapacity) * float64(swapCapacity)), true
}

// isCritical: a static or mirror pod, or one of a system-critical priority
// (the kubelet's IsCriticalPod).
func isCritical(pod *v1.Pod) bool {
	if src, ok := pod.Annotations[configSourceAnnotation]; ok && src != configSourceAPI {
		return true
	}
	if _, ok := pod.Annotations[configMirrorAnnotation]; ok {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}
