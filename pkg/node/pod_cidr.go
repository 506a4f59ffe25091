package node

import (
	"context"
	"fmt"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// defaultPodCIDRPollPeriod is how often the Node is read for its pod CIDR:
// from the watch of the Node, so no request to the apiserver once it has it.
const defaultPodCIDRPollPeriod = 5 * time.Second

// podCIDRRecheck is how often the Node is read once the runtime has its pod
// CIDR: spec.podCIDR cannot change but from empty, so only a Node deleted
// and registered anew brings another.
const podCIDRRecheck = time.Minute

// podCIDRSyncer hands the runtime the Node's spec.podCIDR once the
// controller manager has assigned one, and again whenever it changes, as
// the kubelet does: a runtime whose network plugin takes the pod range from
// its runtime config learns it this way.
type podCIDRSyncer struct {
	// getNode reads the Node, from the watch when it has it.
	getNode func(context.Context) (*v1.Node, error)
	runtime Runtime
	clock   clock.Clock
	period  time.Duration
	// sent is the CIDR the runtime last accepted; a failed hand-over is
	// tried again at the next poll.
	sent string
}

// run polls the Node every period, every podCIDRRecheck once a CIDR was
// handed over, until ctx ends.
func (p *podCIDRSyncer) run(ctx context.Context) {
	for {
		p.sync(ctx)
		wait := p.period
		if p.sent != "" {
			wait = max(wait, podCIDRRecheck)
		}
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(wait):
		}
	}
}

// sync reads the Node once and hands the runtime its pod CIDR if it is
// new. A Node that cannot be read is tried again at the next poll.
func (p *podCIDRSyncer) sync(ctx context.Context) {
	logger := klog.FromContext(ctx)
	n, err := p.getNode(ctx)
	if err != nil {
		return
	}
	cidr, err := nextPodCIDR(n, p.sent)
	if err != nil {
		logger.Info("Ignoring an invalid pod CIDR", "podCIDR", n.Spec.PodCIDR, "err", err.Error())
		return
	}
	if cidr == "" {
		return
	}
	cfg := &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}}
	if err := p.runtime.UpdateRuntimeConfig(ctx, cfg); err != nil {
		logger.Info("Handing the pod CIDR to the runtime failed", "err", err.Error())
		return
	}
	logger.Info("Handed the pod CIDR to the runtime", "podCIDR", cidr)
	p.sent = cidr
}

// nextPodCIDR decides what to hand the runtime given the Node as read and
// the CIDR it last accepted: the Node's spec.podCIDR when one is assigned
// and differs from sent, else "" for nothing to do. An assigned CIDR that
// does not parse is an error and is never handed over.
func nextPodCIDR(n *v1.Node, sent string) (string, error) {
	cidr := n.Spec.PodCIDR
	if cidr == "" || cidr == sent {
		return "", nil
	}
	if _, _, err := net.ParseCIDR(cidr); err != nil {
		return "", fmt.Errorf("pod CIDR %q: %w", cidr, err)
	}
	return cidr, nil
}
