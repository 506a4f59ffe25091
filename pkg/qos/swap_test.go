package qos

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

func TestSetSwap(t *testing.T) {
	const memCap, swapCap = 8 << 30, 4 << 30
	v1Host := SwapOptions{Behavior: NoSwap, Controller: true, Capacity: swapCap}
	v2Limited := SwapOptions{Behavior: LimitedSwap, Controller: true, Unified: true, Capacity: swapCap}
	burstable := func() *v1.Pod { return podWith(res(rl("memory", "1Gi"), rl("memory", "2Gi"))) }
	tests := []struct {
		name        string
		pod         *v1.Pod
		opts        SwapOptions
		memCapacity int64
		// wantSwapLimit is MemorySwapLimitInBytes; wantMax memory.swap.max
		// ("" when not set).
		wantSwapLimit int64
		wantMax       string
	}{
		{name: "no swap controller: nothing set", pod: burstable(), opts: SwapOptions{Behavior: NoSwap}},
		{name: "cgroup v1 NoSwap: memory+swap is the memory limit", pod: burstable(), opts: v1Host, wantSwapLimit: 2 << 30},
		{name: "cgroup v1 NoSwap without a limit: both unlimited", pod: podWith(v1.ResourceRequirements{}), opts: v1Host},
		{name: "cgroup v1 LimitedSwap: NoSwap", pod: burstable(),
			opts: SwapOptions{Behavior: LimitedSwap, Controller: true, Capacity: swapCap}, wantSwapLimit: 2 << 30},
		{name: "cgroup v2 NoSwap: swap.max 0", pod: burstable(),
			opts: SwapOptions{Behavior: NoSwap, Controller: true, Unified: true, Capacity: swapCap}, wantMax: "0"},
		{name: "cgroup v2 empty behaviour is NoSwap", pod: burstable(),
			opts: SwapOptions{Controller: true, Unified: true, Capacity: swapCap}, wantMax: "0"},
		{name: "LimitedSwap: request's share of the node's swap", pod: burstable(), opts: v2Limited, wantMax: "536870912"},
		{name: "LimitedSwap: request without a limit", pod: podWith(res(rl("memory", "2Gi"), nil)), opts: v2Limited, wantMax: "1073741824"},
		{name: "LimitedSwap: guaranteed gets none", pod: podWith(res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))),
			opts: v2Limited, wantMax: "0"},
		{name: "LimitedSwap: besteffort gets none", pod: podWith(v1.ResourceRequirements{}), opts: v2Limited, wantMax: "0"},
		{name: "LimitedSwap: burstable container asking no memory gets none",
			pod: podWith(res(rl("cpu", "100m"), nil), res(rl("memory", "1Gi"), nil)), opts: v2Limited, wantMax: "0"},
		{name: "LimitedSwap: request equal to limit gets none",
			pod: podWith(res(rl("memory", "1Gi"), rl("memory", "1Gi")), res(rl("cpu", "1"), nil)), opts: v2Limited, wantMax: "0"},
		{name: "LimitedSwap: system-critical priority gets none",
			pod: func() *v1.Pod { p := burstable(); p.Spec.Priority = ptr.To(int32(2000000000)); return p }(), opts: v2Limited, wantMax: "0"},
		{name: "LimitedSwap: static pod gets none",
			pod: func() *v1.Pod {
				p := burstable()
				p.Annotations = map[string]string{configSourceAnnotation: "file"}
				return p
			}(), opts: v2Limited, wantMax: "0"},
		{name: "LimitedSwap: high but not critical priority swaps",
			pod: func() *v1.Pod { p := burstable(); p.Spec.Priority = ptr.To(int32(1000000)); return p }(), opts: v2Limited, wantMax: "536870912"},
		{name: "LimitedSwap: request above the node's memory gets none", pod: podWith(res(rl("memory", "16Gi"), nil)), opts: v2Limited, wantMax: "0"},
		{name: "LimitedSwap: unknown memory capacity gets none", pod: burstable(), opts: v2Limited, memCapacity: -1, wantMax: "0"},
		{name: "LimitedSwap: no swap on the node", pod: burstable(),
			opts: SwapOptions{Behavior: LimitedSwap, Controller: true, Unified: true}, wantMax: "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &tt.pod.Spec.Containers[0]
			r := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: c.Resources.Limits.Memory().Value()}
			capacity := int64(memCap)
			if tt.memCapacity != 0 {
				capacity = max(tt.memCapacity, 0)
			}
			setSwap(r, tt.pod, c, capacity, tt.opts)
			if r.MemorySwapLimitInBytes != tt.wantSwapLimit {
				t.Errorf("MemorySwapLimitInBytes = %d, want %d", r.MemorySwapLimitInBytes, tt.wantSwapLimit)
			}
			if got := r.Unified[cgroup2MaxSwap]; got != tt.wantMax {
				t.Errorf("memory.swap.max = %q, want %q", got, tt.wantMax)
			}
		})
	}
}

// TestContainerResourcesKeepsOOMGroupWithSwap: the swap limit joins the
// unified map rather than replacing memory.oom.group.
func TestContainerResourcesKeepsOOMGroupWithSwap(t *testing.T) {
	p := podWith(res(rl("memory", "1Gi"), rl("memory", "2Gi")))
	r := ContainerResources(p, &p.Spec.Containers[0], NodeOptions{MemoryCapacity: 8 << 30, OOMKillGroup: true,
		Swap: SwapOptions{Behavior: NoSwap, Controller: true, Unified: true}})
	if r.Unified["memory.oom.group"] != "1" || r.Unified[cgroup2MaxSwap] != "0" {
		t.Errorf("unified = %v, want memory.oom.group 1 and memory.swap.max 0", r.Unified)
	}
}
