package node

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// apiNode is the Node as an administrator left it: a label and a taint
// added, the registration taint gone, a smaller allocatable.
func apiNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeagent-node", Labels: map[string]string{"disk": "ssd"}},
		Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: "maintenance", Effect: v1.TaintEffectNoExecute}}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("1"), v1.ResourcePods: resource.MustParse("3"),
		}},
	}
}

func TestAdmissionNode(t *testing.T) {
	unavailable := errors.New("connection refused")
	tests := []struct {
		name     string
		mutate   func(*Config)
		existing func() *v1.Node // nil: no Node
		getErr   error
		check    func(t *testing.T, e *testEnv, n *v1.Node)
	}{{
		name:     "the apiserver's node as it is",
		existing: apiNode,
		check: func(t *testing.T, _ *testEnv, n *v1.Node) {
			if n.Labels["disk"] != "ssd" || len(n.Labels) != 1 {
				t.Errorf("labels = %v, want the apiserver's", n.Labels)
			}
			if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "maintenance" {
				t.Errorf("taints = %v, want the apiserver's", n.Spec.Taints)
			}
			checkQuantity(t, n.Status.Allocatable, v1.ResourcePods, "3")
			if _, ok := n.Status.Allocatable[v1.ResourceMemory]; ok {
				t.Errorf("allocatable = %v, want the apiserver's only", n.Status.Allocatable)
			}
		},
	}, {
		name: "the apiserver's node without allocatable gets the agent's",
		existing: func() *v1.Node {
			n := apiNode()
			n.Status.Allocatable = nil
			return n
		},
		check: func(t *testing.T, e *testEnv, n *v1.Node) {
			if n.Labels["disk"] != "ssd" {
				t.Errorf("labels = %v, want the apiserver's", n.Labels)
			}
			if !apiequality.Semantic.DeepEqual(n.Status.Allocatable, e.ctrl.Allocatable()) {
				t.Errorf("allocatable = %v, want %v", n.Status.Allocatable, e.ctrl.Allocatable())
			}
			checkQuantity(t, n.Status.Allocatable, v1.ResourceMemory, "8092Mi")
		},
	}, {
		name:  "no node yet: the local node",
		check: checkLocalNode,
	}, {
		name:     "apiserver unavailable: the local node",
		existing: apiNode,
		getErr:   unavailable,
		check:    checkLocalNode,
	}, {
		name:   "local node of an external cloud provider carries the uninitialized taint",
		mutate: func(c *Config) { c.ExternalCloudProvider = true },
		getErr: unavailable,
		check: func(t *testing.T, _ *testEnv, n *v1.Node) {
			if len(n.Spec.Taints) != 2 || n.Spec.Taints[1].Key != taintExternalCloudProvider {
				t.Errorf("taints = %v, want dedicated and %s", n.Spec.Taints, taintExternalCloudProvider)
			}
		},
	}, {
		name:   "hostname override names the local node's hostname label",
		mutate: func(c *Config) { c.Hostname = "host-1" },
		check: func(t *testing.T, _ *testEnv, n *v1.Node) {
			if n.Name != "nodeagent-node" || n.Labels[v1.LabelHostname] != "host-1" {
				t.Errorf("name %q, hostname label %q", n.Name, n.Labels[v1.LabelHostname])
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, tt.mutate)
			ctx := context.Background()
			if tt.existing != nil {
				if _, err := e.client.CoreV1().Nodes().Create(ctx, tt.existing(), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.getErr != nil {
				e.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tt.getErr
				})
			}
			n, err := e.ctrl.AdmissionNode(ctx)
			if err != nil {
				t.Fatalf("AdmissionNode = %v, want no error", err)
			}
			tt.check(t, e, n)
		})
	}
}

// checkLocalNode checks the node admission falls back to: the configured
// labels and taints, the machine's capacity and allocatable.
func checkLocalNode(t *testing.T, e *testEnv, n *v1.Node) {
	t.Helper()
	if n.Name != "nodeagent-node" {
		t.Errorf("name = %q", n.Name)
	}
	for k, v := range map[string]string{
		v1.LabelHostname: "nodeagent-node", v1.LabelOSStable: "linux", "node.kubernetes.io/pool": "a",
	} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if _, ok := n.Labels["disk"]; ok {
		t.Errorf("labels = %v: the apiserver's node was used", n.Labels)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "dedicated" {
		t.Errorf("taints = %v, want the registration taint", n.Spec.Taints)
	}
	checkQuantity(t, n.Status.Capacity, v1.ResourceCPU, "4")
	checkQuantity(t, n.Status.Capacity, v1.ResourcePods, "110")
	checkQuantity(t, n.Status.Allocatable, v1.ResourceMemory, "8092Mi")
	checkQuantity(t, n.Status.Allocatable, v1.ResourceEphemeralStorage, "96636764k")
}

// The node admission falls back to is the node the agent registers, so a
// pod is judged the same before and after the Node can be read.
func TestLocalNodeIsTheRegisteredNode(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.ExternalCloudProvider = true; c.ProviderID = "cloud://i-1" })
	ctx := context.Background()
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	registered := e.node(t)
	local := e.ctrl.localNode()
	if !apiequality.Semantic.DeepEqual(local.Labels, registered.Labels) {
		t.Errorf("labels: local %v, registered %v", local.Labels, registered.Labels)
	}
	if !apiequality.Semantic.DeepEqual(local.Spec, registered.Spec) {
		t.Errorf("spec: local %+v, registered %+v", local.Spec, registered.Spec)
	}
	if !apiequality.Semantic.DeepEqual(local.Status.Capacity, registered.Status.Capacity) ||
		!apiequality.Semantic.DeepEqual(local.Status.Allocatable, registered.Status.Allocatable) {
		t.Errorf("resources: local %v / %v, registered %v / %v", local.Status.Capacity, local.Status.Allocatable,
			registered.Status.Capacity, registered.Status.Allocatable)
	}
}

// A caller that changes the node it was given changes nothing for the next.
func TestLocalNodeIsACopy(t *testing.T) {
	e := newTestEnv(t, nil)
	first := e.ctrl.localNode()
	first.Labels["disk"] = "ssd"
	first.Spec.Taints[0].Key = "changed"
	first.Status.Allocatable[v1.ResourceCPU] = resource.MustParse("0")
	second := e.ctrl.localNode()
	if _, ok := second.Labels["disk"]; ok || second.Spec.Taints[0].Key != "dedicated" {
		t.Errorf("second local node saw the first's changes: %v %v", second.Labels, second.Spec.Taints)
	}
	checkQuantity(t, second.Status.Allocatable, v1.ResourceCPU, "4")
	checkQuantity(t, e.ctrl.Allocatable(), v1.ResourceCPU, "4")
}
