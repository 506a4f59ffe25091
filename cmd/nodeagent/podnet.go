package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/podnet"
)

const (
	// podNetworkBridgeMode is the one value --pod-network takes besides "".
	podNetworkBridgeMode = "bridge"
	// defaultCNIConfDir is where runtimes read CNI configuration by default
	// (the kubelet's --cni-conf-dir had the same default).
	defaultCNIConfDir = "/etc/cni/net.d"
	// defaultPodNetworkBridge is the bridge device of --pod-network=bridge.
	defaultPodNetworkBridge = "nodeagent0"
)

// podNetworkConfig is the agent's own pod network, when it is on.
type podNetworkConfig struct {
	confDir      string
	bridge       string
	clusterCIDRs []*net.IPNet
}

// buildPodNetworkConfig validates the pod network flags: nil when the
// setting is off.
func buildPodNetworkConfig(f *flags) (*podNetworkConfig, error) {
	switch f.podNetwork {
	case "":
		return nil, nil
	case podNetworkBridgeMode:
	default:
		return nil, fmt.Errorf("--pod-network: %q is not supported, use %q or leave it empty", f.podNetwork, podNetworkBridgeMode)
	}
	if f.clusterCIDR == "" {
		return nil, fmt.Errorf("--cluster-cidr is required with --pod-network=%s", podNetworkBridgeMode)
	}
	cidrs, err := podnet.ParseClusterCIDRs(f.clusterCIDR)
	if err != nil {
		return nil, fmt.Errorf("--cluster-cidr: %w", err)
	}
	if !filepath.IsAbs(f.cniConfDir) {
		return nil, fmt.Errorf("--cni-conf-dir: %q must be an absolute path", f.cniConfDir)
	}
	// The kernel's limit on interface names: 15 bytes, no slash or space.
	if n := f.podNetworkBridge; n == "" || len(n) > 15 || strings.ContainsAny(n, "/ :") {
		return nil, fmt.Errorf("--pod-network-bridge: %q is not a valid interface name (1 to 15 characters, no '/', ':' or space)", n)
	}
	return &podNetworkConfig{confDir: f.cniConfDir, bridge: f.podNetworkBridge, clusterCIDRs: cidrs}, nil
}

// newPodNetwork returns the pod network's component: the Manager when the
// setting is on; when it is off, the removal of what an earlier run made
// if the root dir records any; else nil, and nothing on the machine is
// touched (no iptables call either).
func newPodNetwork(ctx context.Context, cfg *agentConfig, client kube.Interface) (func(context.Context) error, error) {
	pn := cfg.podNetwork
	if pn == nil {
		if !podnet.HasState(cfg.rootDir) {
			return nil, nil
		}
		klog.FromContext(ctx).Info("The pod network is off but an earlier run made one: removing it", "rootDir", cfg.rootDir)
		return func(ctx context.Context) error { return podnet.RunRemove(ctx, cfg.rootDir, nil) }, nil
	}
	m, err := podnet.New(podnet.Config{
		NodeName:     cfg.nodeName,
		Client:       client,
		RootDir:      cfg.rootDir,
		ConfDir:      pn.confDir,
		Bridge:       pn.bridge,
		ClusterCIDRs: pn.clusterCIDRs,
	})
	if err != nil {
		return nil, err
	}
	return m.Run, nil
}
