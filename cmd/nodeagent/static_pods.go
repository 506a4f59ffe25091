package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/config"
)

// newStaticPodSource is where static pods come from: staticPodPath, read
// every fileCheckFrequency. Without staticPodPath it reads nothing.
func newStaticPodSource(ctx context.Context, cfg *agentConfig, recorder config.Recorder) (podSource, error) {
	kc := cfg.kubelet
	if kc.StaticPodURL != "" {
		klog.FromContext(ctx).Info("Warning: staticPodURL is not supported yet and is ignored", "staticPodURL", kc.StaticPodURL)
	}
	if kc.StaticPodPath == "" {
		return noStaticPods{}, nil
	}
	return config.NewFileSource(staticSourceConfig(cfg, recorder))
}

// staticSourceConfig is the file source's configuration from the agent's.
func staticSourceConfig(cfg *agentConfig, recorder config.Recorder) config.StaticConfig {
	return config.StaticConfig{
		Dir:      cfg.kubelet.StaticPodPath,
		NodeName: cfg.nodeName,
		Period:   cfg.kubelet.FileCheckFrequency.Duration,
		Recorder: recorder,
	}
}

// podSource is what run needs of the static pod source.
type podSource interface {
	SetHandler(h config.Handler) error
	HasSynced() bool
	Pods() []*v1.Pod
	Run(ctx context.Context) error
}

// noStaticPods stands in for the file source when staticPodPath is unset.
type noStaticPods struct{}

func (noStaticPods) SetHandler(config.Handler) error { return nil }
func (noStaticPods) HasSynced() bool                 { return true }
func (noStaticPods) Pods() []*v1.Pod                 { return nil }
func (noStaticPods) Run(ctx context.Context) error   { <-ctx.Done(); return nil }

// staticPodHandlers hands each static pod to the dispatcher, which runs
// it, and wakes the mirror controller, which mirrors it.
type staticPodHandlers []config.Handler

func (hs staticPodHandlers) UpsertPod(pod *v1.Pod) {
	for _, h := range hs {
		h.UpsertPod(pod)
	}
}

func (hs staticPodHandlers) RemovePod(pod *v1.Pod) {
	for _, h := range hs {
		h.RemovePod(pod)
	}
}
