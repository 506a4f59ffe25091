package node

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSetStatusKeepsExtendedResources: an extended resource an administrator patched into
// the Node's capacity survives the agent's status writes and shows in allocatable, as with
// the kubelet; native resources are the machine's, a stale one (huge pages the machine no
// longer has) goes.
func TestSetStatusKeepsExtendedResources(t *testing.T) {
	n := &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{
		"example.com/fakecpu": resource.MustParse("1k"),
		"hugepages-1Gi":       resource.MustParse("2Gi"),
		v1.ResourceCPU:        resource.MustParse("64"),
	}}}
	cfg := &Config{MaxPods: 110}
	obs := observation{machine: Machine{NumCPU: 2, MemoryBytes: 1 << 30, EphemeralStorageBytes: 1 << 30}}
	setStatus(cfg, n, obs, metav1.Now())
	for _, list := range []v1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		if q := list["example.com/fakecpu"]; q.Cmp(resource.MustParse("1k")) != 0 {
			t.Errorf("example.com/fakecpu = %v in %v, want 1k", q.String(), list)
		}
		if q := list[v1.ResourceCPU]; q.Value() != 2 {
			t.Errorf("cpu = %v, want the machine's 2", q.String())
		}
		if _, ok := list["hugepages-1Gi"]; ok {
			t.Errorf("stale hugepages-1Gi kept: %v", list)
		}
	}
	for name, want := range map[v1.ResourceName]bool{
		"example.com/dongle": true, "nvidia.com/gpu": true, v1.ResourceCPU: false, "hugepages-2Mi": false,
		"kubernetes.io/something": false, "requests.example.com/x": false, "node.kubernetes.io/x": false,
	} {
		if got := extendedResource(name); got != want {
			t.Errorf("extendedResource(%s) = %v, want %v", name, got, want)
		}
	}
}
