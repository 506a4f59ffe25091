package main

import (
	"context"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/volume/csi"
)

// csiNode is the node's side of CSI: the registry of drivers, the plugin
// watcher that fills it, and the CSINode the node publishes.
type csiNode struct {
	info     *csi.APINodeInfo
	registry *csi.Registry
	watcher  *csi.Watcher
}

func newCSINode(client kubernetes.Interface, nodeName, rootDir string) *csiNode {
	info := &csi.APINodeInfo{Client: client, NodeName: nodeName}
	registry := csi.NewRegistry(info)
	return &csiNode{
		info:     info,
		registry: registry,
		// The kubelet's plugin registration directory below its root dir.
		watcher: &csi.Watcher{Dir: filepath.Join(rootDir, "plugins_registry"), Registry: registry},
	}
}

// Run creates the CSINode as soon as the Node exists, and watches for
// drivers until ctx ends.
func (c *csiNode) Run(ctx context.Context) error {
	go func() {
		_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			if err := c.info.Init(ctx); err != nil {
				klog.FromContext(ctx).V(2).Info("CSINode not created yet, will retry", "err", err)
				return false, nil
			}
			return true, nil
		})
	}()
	return c.watcher.Run(ctx)
}
