package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// AnnotationNodeID is the Node annotation mapping each registered driver
// to its node ID (JSON), as the kubelet writes it.
const AnnotationNodeID = "csi.volume.kubernetes.io/nodeid"

// annotationMigratedPlugins lists on the CSINode the in-tree plugins whose
// volumes this node handles through CSI migration: none here, so the
// controllers never hand this node an in-tree volume to migrate.
const annotationMigratedPlugins = "storage.alpha.kubernetes.io/migrated-plugins"

// APINodeInfo publishes drivers' node facts through the apiserver: the
// nodeid annotation and topology labels on the Node, and the CSINode.
type APINodeInfo struct {
	Client   kube.Interface
	NodeName string
}

// Init makes sure the CSINode exists, as the kubelet creates it at start
// before any driver registers.
func (n *APINodeInfo) Init(ctx context.Context) error {
	return n.updateCSINode(ctx, func(*storagev1.CSINode) {})
}

// AddDriver records d on the Node and the CSINode.
func (n *APINodeInfo) AddDriver(ctx context.Context, d *Driver) error {
	if err := n.updateNode(ctx, func(node *v1.Node) {
		ids := nodeIDs(node)
		ids[d.Name] = d.NodeID
		setNodeIDs(node, ids)
		if len(d.Topology) > 0 && node.Labels == nil {
			node.Labels = map[string]string{}
		}
		for k, v := range d.Topology {
			node.Labels[k] = v
		}
	}); err != nil {
		return err
	}
	return n.updateCSINode(ctx, func(c *storagev1.CSINode) {
		entry := storagev1.CSINodeDriver{Name: d.Name, NodeID: d.NodeID, TopologyKeys: slices.Sorted(maps.Keys(d.Topology))}
		if d.MaxVolumes > 0 {
			count := int32(d.MaxVolumes)
			entry.Allocatable = &storagev1.VolumeNodeResources{Count: &count}
		}
		kept := c.Spec.Drivers[:0]
		for _, e := range c.Spec.Drivers {
			if e.Name != d.Name {
				kept = append(kept, e)
			}
		}
		c.Spec.Drivers = append(kept, entry)
	})
}

// RemoveDriver takes the driver off the Node's annotation and the CSINode.
// Topology labels stay, as the kubelet leaves them.
func (n *APINodeInfo) RemoveDriver(ctx context.Context, name string) error {
	if err := n.updateNode(ctx, func(node *v1.Node) {
		ids := nodeIDs(node)
		delete(ids, name)
		setNodeIDs(node, ids)
	}); err != nil {
		return err
	}
	return n.updateCSINode(ctx, func(c *storagev1.CSINode) {
		kept := c.Spec.Drivers[:0]
		for _, e := range c.Spec.Drivers {
			if e.Name != name {
				kept = append(kept, e)
			}
		}
		c.Spec.Drivers = kept
	})
}

func nodeIDs(node *v1.Node) map[string]string {
	ids := map[string]string{}
	if s, ok := node.Annotations[AnnotationNodeID]; ok {
		_ = json.Unmarshal([]byte(s), &ids)
	}
	return ids
}

func setNodeIDs(node *v1.Node, ids map[string]string) {
	if len(ids) == 0 {
		delete(node.Annotations, AnnotationNodeID)
		return
	}
	b, _ := json.Marshal(ids) // map keys are sorted
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[AnnotationNodeID] = string(b)
}

// updateNode applies change to the Node and writes it when it differs,
// retrying on conflicts.
func (n *APINodeInfo) updateNode(ctx context.Context, change func(*v1.Node)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := n.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get node: %w", err)
		}
		before := node.DeepCopy()
		change(node)
		if equalMeta(before, node) {
			return nil
		}
		_, err = n.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

func equalMeta(a, b *v1.Node) bool {
	return maps.Equal(a.Annotations, b.Annotations) && maps.Equal(a.Labels, b.Labels)
}

// updateCSINode applies change to this node's CSINode, creating it (owned
// by the Node, so it goes with it) when missing.
func (n *APINodeInfo) updateCSINode(ctx context.Context, change func(*storagev1.CSINode)) error {
	api := n.Client.StorageV1().CSINodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := api.Get(ctx, n.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node, err := n.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get node: %w", err)
			}
			c = &storagev1.CSINode{
				ObjectMeta: metav1.ObjectMeta{
					Name:        n.NodeName,
					Annotations: map[string]string{annotationMigratedPlugins: ""},
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
					}},
				},
				Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{}},
			}
			change(c)
			_, err = api.Create(ctx, c, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(storagev1.Resource("csinodes"), n.NodeName, err)
			}
			return err
		}
		if err != nil {
			return fmt.Errorf("get CSINode: %w", err)
		}
		before := c.DeepCopy()
		change(c)
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		if _, ok := c.Annotations[annotationMigratedPlugins]; !ok {
			c.Annotations[annotationMigratedPlugins] = ""
		}
		if csiNodeEqual(before, c) {
			return nil
		}
		_, err = api.Update(ctx, c, metav1.UpdateOptions{})
		return err
	})
}

func csiNodeEqual(a, b *storagev1.CSINode) bool {
	ab, _ := json.Marshal(struct {
		A map[string]string
		S storagev1.CSINodeSpec
	}{a.Annotations, a.Spec})
	bb, _ := json.Marshal(struct {
		A map[string]string
		S storagev1.CSINodeSpec
	}{b.Annotations, b.Spec})
	return string(ab) == string(bb)
}
