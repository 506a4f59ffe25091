// Package qos computes what a pod's quality-of-service class means for
// its resources: the class itself, the CFS values of its cpu requests and
// limits, the OOM score of its containers and the Linux resources the
// runtime gives each container. Everything here is a pure function of the
// pod and the node's settings.
package qos

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Class is the pod's QoS class: the one the apiserver recorded in its
// status, or else the one its resources give.
func Class(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return ComputeClass(pod)
}

// ComputeClass derives the QoS class from the pod's resources, as the API
// defines it: pod-level resources decide when set; otherwise a pod is
// BestEffort when no container asks for cpu or memory, Guaranteed when
// every container's cpu and memory requests equal non-zero limits, and
// Burstable in between.
func ComputeClass(pod *v1.Pod) v1.PodQOSClass {
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		return requirementsClass(pod.Spec.Resources)
	}
	var class v1.PodQOSClass
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := requirementsClass(&list[i].Resources)
			switch {
			case c == v1.PodQOSBurstable:
				return c
			case class == "":
				class = c
			case class != c:
				return v1.PodQOSBurstable
			}
		}
	}
	if class == "" {
		return v1.PodQOSBestEffort
	}
	return class
}

// requirementsClass is the class one set of requirements has on its own.
func requirementsClass(r *v1.ResourceRequirements) v1.PodQOSClass {
	if len(r.Requests) == 0 && len(r.Limits) == 0 {
		return v1.PodQOSBestEffort
	}
	var class v1.PodQOSClass
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		c := resourceClass(r, name)
		switch {
		case c == v1.PodQOSBurstable:
			return c
		case class == "":
			class = c
		case class != c:
			return v1.PodQOSBurstable
		}
	}
	return class
}

// resourceClass: equal non-zero request and limit is Guaranteed, neither
// is BestEffort, anything else Burstable. A limit without a request counts
// as a request of the same size, as the apiserver defaults it.
func resourceClass(r *v1.ResourceRequirements, name v1.ResourceName) v1.PodQOSClass {
	lim := r.Limits[name]
	req, ok := r.Requests[name]
	if !ok {
		req = lim
	}
	switch {
	case !req.Equal(lim):
		return v1.PodQOSBurstable
	case req.IsZero():
		return v1.PodQOSBestEffort
	}
	return v1.PodQOSGuaranteed
}
