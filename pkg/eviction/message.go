package eviction

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Reason is the reason of an evicted pod's status and event, and of a pod
// refused under pressure, as the kubelet names it.
const Reason = "Evicted"

// Keys of the annotations on an eviction event, as the kubelet sets them.
const (
	AnnotationOffendingContainers      = "offending_containers"
	AnnotationOffendingContainersUsage = "offending_containers_usage"
	AnnotationOffendingPod             = "offending_pod"
	AnnotationOffendingPodUsage        = "offending_pod_usage"
	AnnotationStarvedResource          = "starved_resource"
)

// evictionMessage is the message of a pod evicted to reclaim res, with
// the event's annotations, in the kubelet's words: the resource, the
// threshold and what was available, then each container (and the pod,
// with pod-level requests) that used more than it requested.
func evictionMessage(res v1.ResourceName, pod *v1.Pod, usage podUsage, acted []Threshold, obs observations) (string, map[string]string) {
	var b strings.Builder
	fmt.Fprintf(&b, "The node was low on resource: %s. ", res)
	for _, t := range acted {
		o, ok := obs[t.Signal]
		if signalResource[t.Signal] != res || !ok {
			continue
		}
		fmt.Fprintf(&b, "Threshold quantity: %s, available: %s. ", thresholdQuantity(t, o), quantity(o.available, res))
		break
	}
	annotations := map[string]string{}
	stats, ok := usage(pod)
	if !ok {
		return b.String(), annotations
	}
	if res == v1.ResourceMemory && resourcehelper.IsPodLevelResourcesSet(pod) && stats.Memory != nil {
		if req, ok := pod.Spec.Resources.Requests[v1.ResourceMemory]; ok {
			used := quantity(workingSet(stats.Memory), res)
			fmt.Fprintf(&b, "Pod %s was using %s, request is %s, has larger consumption of %s. ", pod.Name, used, req.String(), res)
			annotations[AnnotationOffendingPod] = pod.Name
			annotations[AnnotationOffendingPodUsage] = used
		}
	}
	// Ephemeral containers declare no resources: they would always be to
	// blame, so they are left out, as the kubelet leaves them.
	containers := append(append([]v1.Container(nil), pod.Spec.Containers...), pod.Spec.InitContainers...)
	var names, usages []string
	for _, cs := range stats.Containers {
		for _, c := range containers {
			if c.Name != cs.Name {
				continue
			}
			used, ok := containerUse(cs, res)
			req := c.Resources.Requests[res]
			if ok && used > req.Value() {
				u := quantity(used, res)
				fmt.Fprintf(&b, "Container %s was using %s, request is %s, has larger consumption of %s. ", c.Name, u, req.String(), res)
				names = append(names, c.Name)
				usages = append(usages, u)
			}
			break
		}
	}
	annotations[AnnotationOffendingContainers] = strings.Join(names, ",")
	annotations[AnnotationOffendingContainersUsage] = strings.Join(usages, ",")
	annotations[AnnotationStarvedResource] = string(res)
	return b.String(), annotations
}

// containerUse is what a container used of res: its working set, or its
// writable layer and logs; false when that is not measured.
func containerUse(cs statsapi.ContainerStats, res v1.ResourceName) (int64, bool) {
	switch res {
	case v1.ResourceMemory:
		if cs.Memory == nil || cs.Memory.WorkingSetBytes == nil {
			return 0, false
		}
		return int64(*cs.Memory.WorkingSetBytes), true
	case v1.ResourceEphemeralStorage:
		if cs.Rootfs == nil || cs.Rootfs.UsedBytes == nil || cs.Logs == nil || cs.Logs.UsedBytes == nil {
			return 0, false
		}
		return int64(*cs.Rootfs.UsedBytes + *cs.Logs.UsedBytes), true
	}
	return 0, false
}

// thresholdQuantity shows a threshold's amount: as configured, or the
// share of capacity a percentage comes to.
func thresholdQuantity(t Threshold, o observation) string {
	if t.Value.Quantity != nil {
		return t.Value.Quantity.String()
	}
	return resource.NewQuantity(t.Value.of(o.capacity), resource.BinarySI).String()
}
