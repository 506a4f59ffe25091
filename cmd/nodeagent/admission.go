package main

import (
	"context"
	goruntime "runtime"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/node"
	podsync "github.com/nodeagent/nodeagent/pkg/sync"
)

// admissionNode returns the node pods are admitted against: the Node as
// the apiserver has it (labels and taints users may have changed), or,
// while it cannot be read, the node as the agent registers it.
func admissionNode(client kubernetes.Interface, cfg *agentConfig, capacity v1.ResourceList) podsync.NodeGetter {
	kc := cfg.kubelet
	hostname := cfg.hostname
	if hostname == "" {
		hostname = cfg.nodeName
	}
	local := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: cfg.nodeName, Labels: map[string]string{
			v1.LabelHostname: hostname, v1.LabelOSStable: goruntime.GOOS, v1.LabelArchStable: goruntime.GOARCH}},
		Spec: v1.NodeSpec{Taints: kc.RegisterWithTaints},
		Status: v1.NodeStatus{
			Capacity:    capacity,
			Allocatable: node.Allocatable(capacity, cfg.kubeReserved, cfg.systemReserved, cfg.evictionHard),
		},
	}
	for k, v := range cfg.nodeLabels {
		local.Labels[k] = v
	}
	return func(ctx context.Context) (*v1.Node, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, cfg.nodeName, metav1.GetOptions{})
		if err != nil {
			klog.FromContext(ctx).Info("Admitting against the local node: reading the Node failed", "err", err.Error())
			return local, nil
		}
		if len(n.Status.Allocatable) == 0 {
			n.Status.Allocatable = local.Status.Allocatable
		}
		return n, nil
	}
}
