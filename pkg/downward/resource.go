package downward

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ResourceValue is a container's request or limit of cpu, memory,
// ephemeral-storage or a hugepages-<size>, in units of the selector's
// divisor (1 when unset), rounded up: cpu "250m" reads as "1", or "250"
// with divisor 1m. The container is the one the selector names, or, when
// it names none, c: the container whose env asks (nil for a volume).
//
// An unset or zero cpu, memory or ephemeral-storage limit reads as the
// most the container may use: the node's allocatable or, for env, the
// pod-level limit when the pod sets one (the kubelet reads pod-level
// limits for env only). Unset requests and huge page limits read as 0.
func ResourceValue(pod *v1.Pod, c *v1.Container, sel *v1.ResourceFieldSelector, use Use, in Inputs) (string, error) {
	target := c
	if sel.ContainerName != "" {
		target = findContainer(pod, sel.ContainerName)
	}
	if target == nil {
		return "", fmt.Errorf("container %s not found", sel.ContainerName)
	}
	kind, name, _ := strings.Cut(sel.Resource, ".")
	res := v1.ResourceName(name)
	if !supported(kind, res) {
		return "", fmt.Errorf("unsupported container resource : %v", sel.Resource)
	}
	q := target.Resources.Requests[res]
	if kind == "limits" {
		q = limit(pod, target, res, use, in.Allocatable)
	}
	divisor := sel.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	var n float64
	if res == v1.ResourceCPU {
		n = math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue()))
	} else {
		n = math.Ceil(float64(q.Value()) / float64(divisor.Value()))
	}
	return strconv.FormatInt(int64(n), 10), nil
}

func supported(kind string, res v1.ResourceName) bool {
	if kind != "limits" && kind != "requests" {
		return false
	}
	switch res {
	case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage:
		return true
	}
	return strings.HasPrefix(string(res), v1.ResourceHugePagesPrefix)
}

// limit is the container's limit of res, or what stands in for an unset
// one.
func limit(pod *v1.Pod, c *v1.Container, res v1.ResourceName, use Use, allocatable v1.ResourceList) resource.Quantity {
	set := c.Resources.Limits[res]
	switch {
	case !set.IsZero():
		return set
	case res != v1.ResourceCPU && res != v1.ResourceMemory && res != v1.ResourceEphemeralStorage:
		return set
	}
	bound, ok := allocatable[res]
	if !ok {
		return set
	}
	if use == Env && pod.Spec.Resources != nil && (res == v1.ResourceCPU || res == v1.ResourceMemory) {
		if podLimit := pod.Spec.Resources.Limits[res]; !podLimit.IsZero() {
			return podLimit
		}
	}
	return bound
}

// findContainer finds a regular or init container by name; ephemeral
// containers have no resources to read.
func findContainer(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
