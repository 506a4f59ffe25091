package node

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// AdmissionNode returns the node pods are admitted against. It is the
// Node as the apiserver has it, since users may have changed its labels
// and taints since registration; while the Node cannot be read (the
// apiserver is away, or the Node is not registered yet) it is the Node as
// the agent registers it, so that admission still judges labels, taints
// and resources. A Node without allocatable yet gets the agent's own.
// It never returns an error; its signature is that of a node getter.
func (c *Controller) AdmissionNode(ctx context.Context) (*v1.Node, error) {
	n, err := c.getNode(ctx)
	if err != nil {
		klog.FromContext(ctx).Info("Admitting against the local node: reading the Node failed", "err", err.Error())
		return c.localNode(), nil
	}
	n = n.DeepCopy()
	if len(n.Status.Allocatable) == 0 {
		n.Status.Allocatable = c.Allocatable()
	}
	return n, nil
}

// localNode is the Node as the agent registers it, without the parts that
// need the runtime (conditions, images, node info): metadata and spec
// from the configuration, capacity and allocatable from the machine. Each
// caller gets its own copy.
func (c *Controller) localNode() *v1.Node {
	n := configuredNode(&c.cfg)
	r := c.resources()
	n.Status.Capacity = r.capacity.DeepCopy()
	n.Status.Allocatable = r.allocatable.DeepCopy()
	return n
}
