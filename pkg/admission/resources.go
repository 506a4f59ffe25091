package admission

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// fitResources checks the pod's requests against the node's allocatable
// less what the admitted pods request: first the pod count, then cpu,
// memory, ephemeral storage and every other resource (huge pages,
// extended resources), reporting the first that does not fit.
// used is what the admitted pods request together (requestsOf).
func fitResources(pod *v1.Pod, node *v1.Node, admitted []*v1.Pod, used map[v1.ResourceName]int64) Result {
	alloc := node.Status.Allocatable
	if maxPods := alloc.Pods().Value(); int64(len(admitted))+1 > maxPods {
		return insufficient(v1.ResourcePods, 1, int64(len(admitted)), maxPods)
	}
	want := podRequests(pod)
	names := make([]v1.ResourceName, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		return order(names[i]) < order(names[j]) || (order(names[i]) == order(names[j]) && names[i] < names[j])
	})
	for _, name := range names {
		req := want[name]
		if req <= 0 {
			continue
		}
		q, ok := alloc[name]
		if !ok && isExtended(name) {
			// An extended resource the node does not have at all is
			// left to its device plugin, as the kubelet leaves it.
			continue
		}
		capacity := amount(name, q)
		if req > capacity-used[name] {
			return insufficient(name, req, used[name], capacity)
		}
	}
	return Result{Admit: true}
}

// FitResize judges an in-place resize of a running pod: whether what its
// spec now asks for fits in the node's allocatable beside what the other
// pods were allocated. A refusal is OutOf<resource> with the message
// admission gives; the caller defers the resize.
func FitResize(pod *v1.Pod, allocatable v1.ResourceList, others []*v1.Pod) Result {
	return fitResources(pod, &v1.Node{Status: v1.NodeStatus{Allocatable: allocatable}}, others, requestsOf(others, nil))
}

// requestsOf is what pods request together. With a cache, a pod's own
// requests are taken from it when the same object was summed before.
func requestsOf(pods []*v1.Pod, cache *requestCache) map[v1.ResourceName]int64 {
	used := map[v1.ResourceName]int64{}
	var seen map[*v1.Pod]map[v1.ResourceName]int64
	if cache != nil {
		cache.mu.Lock()
		defer cache.mu.Unlock()
		seen = make(map[*v1.Pod]map[v1.ResourceName]int64, len(pods))
	}
	for _, p := range pods {
		r, ok := map[v1.ResourceName]int64(nil), false
		if cache != nil {
			r, ok = cache.pods[p]
		}
		if !ok {
			r = podRequests(p)
		}
		if seen != nil {
			seen[p] = r
		}
		for name, v := range r {
			used[name] += v
		}
	}
	if cache != nil {
		cache.pods = seen // what is not admitted any more is dropped
	}
	return used
}

// requestCache keeps the requests of the pods admission summed last time,
// by object: admission sums every admitted pod each time it judges one,
// so on a node filling with pods the same pods would be worked out over
// and over. The agent's pods are shared and never modified in place: a
// changed pod (a resize allocated) is a new object, worked out again.
type requestCache struct {
	mu   sync.Mutex
	pods map[*v1.Pod]map[v1.ResourceName]int64
}

// order puts the resources in the order the kubelet checks them.
func order(name v1.ResourceName) int {
	switch name {
	case v1.ResourceCPU:
		return 0
	case v1.ResourceMemory:
		return 1
	case v1.ResourceEphemeralStorage:
		return 2
	}
	return 3
}

// podRequests is what the pod asks for, as the scheduler counts it
// (init containers' peaks, sidecars, overhead, pod-level requests), with
// cpu in millicores and everything else in units.
func podRequests(pod *v1.Pod) map[v1.ResourceName]int64 {
	out := map[v1.ResourceName]int64{}
	for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		if name == v1.ResourcePods {
			continue
		}
		out[name] = amount(name, q)
	}
	return out
}

func amount(name v1.ResourceName, q resource.Quantity) int64 {
	if name == v1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// isExtended: a resource outside the kubernetes.io namespace (a device
// plugin's), not a native one such as huge pages.
func isExtended(name v1.ResourceName) bool {
	domain, _, ok := strings.Cut(string(name), "/")
	if !ok || strings.HasPrefix(string(name), "requests.") {
		return false
	}
	return domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}

// insufficient is the kubelet's rejection for a resource that does not fit.
func insufficient(name v1.ResourceName, requested, used, capacity int64) Result {
	return reject(outOfPrefix+string(name), fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
		name, requested, used, capacity))
}
