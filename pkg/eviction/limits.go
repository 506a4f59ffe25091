package eviction

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Local storage limits (localStorageCapacityIsolation). A pod that uses
// more local storage than its own spec allows is evicted whether or not
// the node is short of disk: no threshold, condition or minimum reclaim is
// involved, and every such pod goes in the same pass, before the node's
// thresholds are looked at, as in the kubelet.

// The pseudo-signals local storage evictions are counted under in
// kubelet_evictions, the kubelet's.
const (
	signalEmptyDirFsLimit           = "emptydirfs.limit"
	signalEphemeralPodFsLimit       = "ephemeralpodfs.limit"
	signalEphemeralContainerFsLimit = "ephemeralcontainerfs.limit"
)

// limitBreach is a pod over one of its local storage limits, with the
// kubelet's message for it and the limit's pseudo-signal.
type limitBreach struct {
	pod     *v1.Pod
	message string
	signal  string
}

// overLimits finds the pods, in the order given, that use more local
// storage than their spec allows, each with the first limit it breaks in
// the kubelet's order: an emptyDir's sizeLimit (in the order of the
// volumes), then the pod's total ephemeral-storage limit, then a
// container's. Pods without stats are passed over.
//
// A container's usage is its logs, and its writable layer when that lies
// on the node's filesystem (no dedicated image filesystem), as the kubelet
// counts it. The pod's usage is the Summary's ephemeral storage: the
// containers' writable layers and logs, its ephemeral volumes, its own log
// files and its hosts file.
func overLimits(pods []*v1.Pod, usage podUsage, dedicatedImageFs bool) []limitBreach {
	var out []limitBreach
	for _, pod := range pods {
		stats, ok := usage(pod)
		if !ok {
			continue
		}
		for _, check := range []struct {
			signal string
			over   func() (string, bool)
		}{
			{signalEmptyDirFsLimit, func() (string, bool) { return emptyDirOverLimit(pod, stats) }},
			{signalEphemeralPodFsLimit, func() (string, bool) { return podOverLimit(pod, stats) }},
			{signalEphemeralContainerFsLimit, func() (string, bool) { return containerOverLimit(pod, stats, dedicatedImageFs) }},
		} {
			if msg, over := check.over(); over {
				out = append(out, limitBreach{pod: pod, message: msg, signal: check.signal})
				break
			}
		}
	}
	return out
}

// hasLocalStorageLimit says whether overLimits can find the pod over a
// limit: it has an emptyDir with a sizeLimit, or an ephemeral-storage
// limit on a container (the pod's limit is their sum).
func hasLocalStorageLimit(pod *v1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.Sign() > 0 {
			return true
		}
	}
	_, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]
	return ok
}

// emptyDirOverLimit: an emptyDir volume holding more than its sizeLimit.
// Memory-backed ones are checked too, as the kubelet does with
// InPlacePodVerticalScalingMemoryBackedVolumes at its default (off); their
// tmpfs is sized to the limit, so they rarely exceed it.
func emptyDirOverLimit(pod *v1.Pod, stats statsapi.PodStats) (string, bool) {
	used := map[string]int64{}
	for _, v := range stats.VolumeStats {
		if v.UsedBytes != nil {
			used[v.Name] = int64(*v.UsedBytes)
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Sign() <= 0 {
			continue
		}
		u, ok := used[v.Name]
		if !ok {
			continue
		}
		if limit := *v.EmptyDir.SizeLimit; storage(u).Cmp(limit) > 0 {
			return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", v.Name, limit.String()), true
		}
	}
	return "", false
}

// podOverLimit: the pod's ephemeral storage past the sum of its
// containers' ephemeral-storage limits (as the scheduler adds them up,
// with the pod overhead), when one of them sets one.
func podOverLimit(pod *v1.Pod, stats statsapi.PodStats) (string, bool) {
	limit, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]
	if !ok {
		return "", false
	}
	var u int64
	if es := stats.EphemeralStorage; es != nil && es.UsedBytes != nil {
		u = int64(*es.UsedBytes)
	}
	if storage(u).Cmp(limit) > 0 {
		return fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", limit.String()), true
	}
	return "", false
}

// containerOverLimit: a container (or a sidecar: a restartable init
// container) past its own ephemeral-storage limit. Other init containers
// have ended and ephemeral containers set no limits.
func containerOverLimit(pod *v1.Pod, stats statsapi.PodStats, dedicatedImageFs bool) (string, bool) {
	limits := map[string]resource.Quantity{}
	add := func(c v1.Container) {
		if l, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok && l.Value() != 0 {
			limits[c.Name] = l
		}
	}
	for _, c := range pod.Spec.Containers {
		add(c)
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for _, cs := range stats.Containers {
		limit, ok := limits[cs.Name]
		if !ok {
			continue
		}
		u, _ := fsUsed(cs.Logs)
		if !dedicatedImageFs {
			r, _ := fsUsed(cs.Rootfs)
			u += r
		}
		if storage(u).Cmp(limit) > 0 {
			return fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", cs.Name, limit.String()), true
		}
	}
	return "", false
}

func storage(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.BinarySI) }
