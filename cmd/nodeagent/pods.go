package main

import (
	"context"
	"path"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodeagent/nodeagent/pkg/cgroups"
	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/pleg"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/volume"
)

// eventComponent is the source of the agent's events: what `kubectl
// describe` shows in its From column, as for a kubelet.
const eventComponent = "kubelet"

// seccompDir holds Localhost seccomp profiles under the root dir, where
// the kubelet looks for them.
const seccompDir = "seccomp"

// newEventRecorder starts an event broadcaster writing core/v1 events
// and returns its recorder and a function stopping it.
func newEventRecorder(ctx context.Context, client kube.Interface, nodeName string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(kube.EventSink{Client: client})
	return b.NewRecorder(kube.Scheme, v1.EventSource{Component: eventComponent, Host: nodeName}), b.Shutdown
}

// podOptions turns the configuration into the settings of every pod sandbox.
func podOptions(cfg *agentConfig) runtime.PodOptions {
	kc := cfg.kubelet
	// With cgroupsPerQOS each pod gets its own cgroup as its parent (see
	// startCgroups); without, every sandbox goes straight under cgroupRoot.
	parent := path.Join("/", kc.CgroupRoot)
	resolv := ""
	if kc.ResolverConfig != nil {
		resolv = *kc.ResolverConfig
	}
	return runtime.PodOptions{
		PodLogsDir:   kc.PodLogsDir,
		CgroupParent: parent,
		DNS:          runtime.DNSOptions{ClusterDNS: kc.ClusterDNS, ClusterDomain: kc.ClusterDomain, ResolvConf: resolv},
		Security: runtime.SecurityOptions{
			SeccompDefault:     kc.SeccompDefault != nil && *kc.SeccompDefault,
			SeccompProfileRoot: filepath.Join(cfg.rootDir, seccompDir),
		},
	}
}

// hostIPs are the addresses reported as pods' hostIP(s): --node-ip, or
// the address the node would be detected with.
func hostIPs(cfg *agentConfig) []string {
	var out []string
	for _, ip := range cfg.nodeIPs {
		out = append(out, ip.String())
	}
	if len(out) == 0 {
		if ip, err := utilnet.ChooseHostInterface(); err == nil {
			out = []string{ip.String()}
		}
	}
	return out
}

// maxRestartBackoff is crashLoopBackOff.maxContainerRestartPeriod, or zero
// for the default.
func maxRestartBackoff(kc *kubeletv1beta1.KubeletConfiguration) time.Duration {
	if d := kc.CrashLoopBackOff.MaxContainerRestartPeriod; d != nil {
		return d.Duration
	}
	return 0
}

// knownPods are the pods the node holds anything of: those in the runtime,
// those with a directory left on disk and those with a pod cgroup (found
// after a restart), so that a pod the apiserver no longer has is cleaned
// up whatever is left of it.
func knownPods(ctx context.Context, inRuntime []runtime.PodRef, volumes *volume.Manager, cg *cgroups.Manager) []runtime.PodRef {
	seen := make(map[types.UID]bool, len(inRuntime))
	for _, ref := range inRuntime {
		seen[ref.UID] = true
	}
	add := func(uid types.UID) {
		if !seen[uid] {
			seen[uid] = true
			inRuntime = append(inRuntime, runtime.PodRef{UID: uid})
		}
	}
	onDisk, err := volumes.PodUIDs()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing pod directories failed")
	}
	for _, uid := range onDisk {
		add(uid)
	}
	if cg != nil {
		uids, err := cg.PodUIDs()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Listing pod cgroups failed")
		}
		for _, uid := range uids {
			add(uid)
		}
	}
	return inRuntime
}

// knownPod says whether the runtime, the pods' directories or the cgroups
// hold anything of one pod: knownPods for a single pod, without listing.
func knownPod(uid types.UID, inRuntime *pleg.Cache, volumes *volume.Manager, cg *cgroups.Manager) bool {
	return inRuntime.Has(uid) || volumes.HasPod(uid) || (cg != nil && cg.HasPod(uid))
}

// maxParallelImagePulls is 1 when pulls are serialized (the default), else
// maxParallelImagePulls, else zero for no limit.
func maxParallelImagePulls(kc *kubeletv1beta1.KubeletConfiguration) int {
	switch {
	case kc.SerializeImagePulls == nil || *kc.SerializeImagePulls:
		return 1
	case kc.MaxParallelImagePulls != nil:
		return int(*kc.MaxParallelImagePulls)
	}
	return 0
}
