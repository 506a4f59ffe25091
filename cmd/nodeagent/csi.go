package main

import (
	"context"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/volume"
	"github.com/nodeagent/nodeagent/pkg/volume/csi"
)

// csiNode is the node's side of CSI: the registry of drivers, the plugin
// watcher that fills it, and the CSINode the node publishes.
type csiNode struct {
	info     *csi.APINodeInfo
	registry *csi.Registry
	watcher  *csi.Watcher
}

func newCSINode(client kube.Interface, nodeName, rootDir string) *csiNode {
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

// csiUsage turns a driver's volume usage into the Summary API's figures.
func csiUsage(usage func(context.Context) (volume.VolumeUsage, error)) func(context.Context) (*statsapi.FsStats, error) {
	return func(ctx context.Context) (*statsapi.FsStats, error) {
		u, err := usage(ctx)
		if err != nil {
			return nil, err
		}
		val := func(n int64) *uint64 {
			if n < 0 {
				n = 0
			}
			v := uint64(n)
			return &v
		}
		return &statsapi.FsStats{
			Time:           metav1.Now(),
			CapacityBytes:  val(u.CapacityBytes),
			AvailableBytes: val(u.AvailableBytes),
			UsedBytes:      val(u.UsedBytes),
			Inodes:         val(u.Inodes),
			InodesFree:     val(u.InodesFree),
			InodesUsed:     val(u.InodesUsed),
		}, nil
	}
}
