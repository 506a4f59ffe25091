package csi

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// TestNodeInfoPublishesDrivers: the CSINode is created owned by the Node,
// a driver lands on it and in the Node's nodeid annotation with its
// topology labels, and its removal takes it off both but keeps the labels.
func TestNodeInfoPublishesDrivers(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1",
		Annotations: map[string]string{"other": "kept"}}})
	info := &APINodeInfo{Client: kubetest.Wrap(client), NodeName: "n1"}
	if err := info.Init(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.OwnerReferences) != 1 || c.OwnerReferences[0].UID != "uid-1" || c.OwnerReferences[0].Kind != "Node" || len(c.Spec.Drivers) != 0 {
		t.Fatalf("initial CSINode = %+v", c)
	}

	for _, d := range []*Driver{
		{Name: "b.csi", NodeID: "id-b", MaxVolumes: 3, Topology: map[string]string{"topo/zone": "z", "topo/rack": "r"}},
		{Name: "a.csi", NodeID: "id-a"},
	} {
		if err := info.AddDriver(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	node, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if got := node.Annotations[AnnotationNodeID]; got != `{"a.csi":"id-a","b.csi":"id-b"}` {
		t.Fatalf("nodeid annotation = %q", got)
	}
	if node.Annotations["other"] != "kept" || node.Labels["topo/zone"] != "z" || node.Labels["topo/rack"] != "r" {
		t.Fatalf("node metadata = %v %v", node.Annotations, node.Labels)
	}
	c, _ = client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if len(c.Spec.Drivers) != 2 {
		t.Fatalf("CSINode drivers = %+v", c.Spec.Drivers)
	}
	b := c.Spec.Drivers[0]
	if b.Name != "b.csi" || b.NodeID != "id-b" || b.Allocatable == nil || *b.Allocatable.Count != 3 ||
		len(b.TopologyKeys) != 2 || b.TopologyKeys[0] != "topo/rack" {
		t.Fatalf("CSINode driver b = %+v", b)
	}
	if a := c.Spec.Drivers[1]; a.Allocatable != nil {
		t.Fatalf("driver without a volume limit has allocatable %+v", a.Allocatable)
	}

	if err := info.RemoveDriver(ctx, "b.csi"); err != nil {
		t.Fatal(err)
	}
	node, _ = client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	c, _ = client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if node.Annotations[AnnotationNodeID] != `{"a.csi":"id-a"}` || node.Labels["topo/zone"] != "z" || len(c.Spec.Drivers) != 1 || c.Spec.Drivers[0].Name != "a.csi" {
		t.Fatalf("after removal: annotation %q labels %v drivers %+v", node.Annotations[AnnotationNodeID], node.Labels, c.Spec.Drivers)
	}
	if err := info.RemoveDriver(ctx, "a.csi"); err != nil {
		t.Fatal(err)
	}
	node, _ = client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if _, ok := node.Annotations[AnnotationNodeID]; ok {
		t.Fatalf("empty nodeid annotation left: %v", node.Annotations)
	}
}
