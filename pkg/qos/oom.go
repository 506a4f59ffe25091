package qos

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// OOM score adjustments of the classes, as the kubelet sets them: the
// kernel kills BestEffort containers first and Guaranteed ones last.
const (
	GuaranteedOOMScoreAdj = -997
	BestEffortOOMScoreAdj = 1000
)

// Node-critical pods are scored as Guaranteed whatever their class.
const (
	nodeCriticalPriorityClass = "system-node-critical"
	systemCriticalPriority    = 2000000000
	configSourceAnnotation    = "kubernetes.io/config.source"
	configMirrorAnnotation    = "kubernetes.io/config.mirror"
	configSourceAPI           = "api"
)

// OOMScoreAdj is the oom_score_adj of container c of pod on a node with
// memoryCapacity bytes. A Burstable container is scored by the share of
// the node's memory it requests: 1000 - 1000*request/capacity, kept
// within [1000+GuaranteedOOMScoreAdj, 999] so that it always sits between
// the Guaranteed and the BestEffort ones. A sidecar scores no higher
// than the app container that requests least, so that it is not killed
// before the containers it serves.
func OOMScoreAdj(pod *v1.Pod, c *v1.Container, memoryCapacity int64) int64 {
	if isNodeCritical(pod) {
		return GuaranteedOOMScoreAdj
	}
	switch Class(pod) {
	case v1.PodQOSGuaranteed:
		return GuaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return BestEffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		return BestEffortOOMScoreAdj - 1
	}
	extra := unassignedMemoryPerContainer(pod)
	score := 1000 - 1000*(c.Resources.Requests.Memory().Value()+extra)/memoryCapacity
	if isSidecar(pod, c) && len(pod.Spec.Containers) > 0 {
		least := pod.Spec.Containers[0].Resources.Requests.Memory().Value()
		for _, app := range pod.Spec.Containers[1:] {
			least = min(least, app.Resources.Requests.Memory().Value())
		}
		score = min(score, 1000-1000*(least+extra)/memoryCapacity)
	}
	return min(max(score, 1000+GuaranteedOOMScoreAdj), BestEffortOOMScoreAdj-1)
}

// unassignedMemoryPerContainer spreads the part of a pod-level memory
// request that no container asks for evenly over the containers.
func unassignedMemoryPerContainer(pod *v1.Pod) int64 {
	if !resourcehelper.IsPodLevelRequestsSet(pod) || pod.Spec.Resources.Requests.Memory().IsZero() {
		return 0
	}
	n := int64(len(pod.Spec.Containers) + len(pod.Spec.InitContainers))
	if n == 0 {
		return 0
	}
	containers := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
	left := max(pod.Spec.Resources.Requests.Memory().Value()-containers.Memory().Value(), 0)
	return left / n
}

// isSidecar says whether c is a restartable init container of pod.
func isSidecar(pod *v1.Pod, c *v1.Container) bool {
	if c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}

// isNodeCritical: a pod of the system-node-critical class that is static,
// mirrored or of a system-critical priority.
func isNodeCritical(pod *v1.Pod) bool {
	if pod.Spec.PriorityClassName != nodeCriticalPriorityClass {
		return false
	}
	if src, ok := pod.Annotations[configSourceAnnotation]; ok && src != configSourceAPI {
		return true
	}
	if _, ok := pod.Annotations[configMirrorAnnotation]; ok {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}
