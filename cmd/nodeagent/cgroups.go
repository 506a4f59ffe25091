package main

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeagent/nodeagent/pkg/cgroups"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/qos"
)

// enforcePods is the enforceNodeAllocatable key that bounds kubepods by
// node allocatable.
const enforcePods = "pods"

// kubepodsLimits is what the kubepods cgroup is bounded by: capacity less
// the kube and system reservations when enforceNodeAllocatable has
// "pods" (eviction thresholds stay usable, as with the kubelet, so that
// eviction rather than the OOM killer acts first), the whole capacity
// otherwise.
func kubepodsLimits(cfg *agentConfig, capacity v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for name, q := range capacity {
		if name == v1.ResourcePods || name == v1.ResourceEphemeralStorage {
			continue
		}
		out[name] = q.DeepCopy()
	}
	if !slices.Contains(cfg.kubelet.EnforceNodeAllocatable, enforcePods) {
		return out
	}
	for _, reserved := range []v1.ResourceList{cfg.kubeReserved, cfg.systemReserved} {
		for name, r := range reserved {
			q, ok := out[name]
			if !ok {
				continue
			}
			q.Sub(r)
			if q.Sign() < 0 {
				q = *resource.NewQuantity(0, q.Format)
			}
			out[name] = q
		}
	}
	return out
}

// startCgroups makes the kubepods hierarchy when cgroupsPerQOS is on and
// returns its manager; nil when off.
func startCgroups(ctx context.Context, cfg *agentConfig, capacity v1.ResourceList) (*cgroups.Manager, error) {
	kc := cfg.kubelet
	if kc.CgroupsPerQOS == nil || !*kc.CgroupsPerQOS {
		return nil, nil
	}
	m, err := cgroups.New(cgroups.Config{
		Root:   kc.CgroupRoot,
		Driver: kc.CgroupDriver,
		Pod: cgroups.PodOptions{
			CPUCFSQuota:       *kc.CPUCFSQuota,
			CPUCFSQuotaPeriod: kc.CPUCFSQuotaPeriod.Duration,
			PodPidsLimit:      *kc.PodPidsLimit,
		},
		NodeLimits: kubepodsLimits(cfg, capacity),
	})
	if err != nil {
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		return nil, err
	}
	for _, r := range []struct {
		key, compressible, cgroup string
		reserved                  v1.ResourceList
	}{
		{enforceSystemReserved, enforceSystemReservedCompressed, kc.SystemReservedCgroup, cfg.systemReserved},
		{enforceKubeReserved, enforceKubeReservedCompressed, kc.KubeReservedCgroup, cfg.kubeReserved},
	} {
		full, compressible := slices.Contains(kc.EnforceNodeAllocatable, r.key), slices.Contains(kc.EnforceNodeAllocatable, r.compressible)
		if !full && !compressible {
			continue
		}
		if err := m.EnforceReserved(ctx, r.cgroup, r.reserved, compressible); err != nil {
			return nil, fmt.Errorf("enforce %s on %q: %w", r.key, r.cgroup, err)
		}
	}
	return m, nil
}

// containerResourceOptions are the node settings every container's
// resources are computed with.
func containerResourceOptions(cfg *agentConfig, machine node.Machine) qos.NodeOptions {
	kc := cfg.kubelet
	unified := cgroups.HostUnified()
	// singleProcessOOMKill defaults to true on cgroup v1 (where it is the
	// only behaviour) and false on v2, as the kubelet defaults it.
	single := !unified
	if kc.SingleProcessOOMKill != nil {
		single = *kc.SingleProcessOOMKill
	}
	return qos.NodeOptions{
		CPUCFSQuota:       *kc.CPUCFSQuota,
		CPUCFSQuotaPeriod: kc.CPUCFSQuotaPeriod.Duration,
		MemoryCapacity:    machine.MemoryBytes,
		HugePageSizes:     cgroups.HostHugePageSizes(),
		OOMKillGroup:      unified && !single,
		Swap:              hostSwap("", kc.MemorySwap.SwapBehavior, unified),
	}
}
