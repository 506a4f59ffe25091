package main

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/config"
)

// newStaticPodSource is where static pods come from: staticPodPath, read
// every fileCheckFrequency, and staticPodURL, read every
// httpCheckFrequency; both when both are set, as with the kubelet. With
// neither it reads nothing.
func newStaticPodSource(ctx context.Context, cfg *agentConfig, recorder config.Recorder) (podSource, error) {
	kc := cfg.kubelet
	var sources staticSources
	if kc.StaticPodPath != "" {
		src, err := config.NewFileSource(staticSourceConfig(cfg, recorder))
		if err != nil {
			return nil, err
		}
		sources = append(sources, src)
	}
	if kc.StaticPodURL != "" {
		hc := httpSourceConfig(cfg, recorder)
		// The header's values may be credentials: only their names are logged.
		klog.FromContext(ctx).Info("Adding static pod URL", "url", hc.URL, "headers", slices.Sorted(maps.Keys(hc.Header)))
		src, err := config.NewHTTPSource(hc)
		if err != nil {
			return nil, err
		}
		sources = append(sources, src)
	}
	switch len(sources) {
	case 0:
		return noStaticPods{}, nil
	case 1:
		return sources[0], nil
	}
	return sources, nil
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

// httpSourceConfig is the URL source's configuration from the agent's:
// staticPodURLHeader's values are sent in the order written.
func httpSourceConfig(cfg *agentConfig, recorder config.Recorder) config.HTTPConfig {
	header := http.Header{}
	for name, values := range cfg.kubelet.StaticPodURLHeader {
		for _, v := range values {
			header.Add(name, v)
		}
	}
	return config.HTTPConfig{
		URL:      cfg.kubelet.StaticPodURL,
		Header:   header,
		NodeName: cfg.nodeName,
		Period:   cfg.kubelet.HTTPCheckFrequency.Duration,
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

var (
	_ podSource = (*config.FileSource)(nil)
	_ podSource = (*config.HTTPSource)(nil)
	_ podSource = staticSources(nil)
)

// staticSources is several static pod sources as one: the file's and the
// URL's. Each hands its own pods to the handler; a pod's UID hashes where
// it was read, so two sources never hand over the same pod.
type staticSources []podSource

// SetHandler gives every source the handler.
func (ss staticSources) SetHandler(h config.Handler) error {
	for _, s := range ss {
		if err := s.SetHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// HasSynced reports whether every source has been read once.
func (ss staticSources) HasSynced() bool {
	for _, s := range ss {
		if !s.HasSynced() {
			return false
		}
	}
	return true
}

// Pods returns every source's pods, by name.
func (ss staticSources) Pods() []*v1.Pod {
	var out []*v1.Pod
	for _, s := range ss {
		out = append(out, s.Pods()...)
	}
	slices.SortFunc(out, func(a, b *v1.Pod) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	return out
}

// Run runs every source until ctx ends; one that fails stops the others.
func (ss staticSources) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range ss {
		g.Go(func() error { return s.Run(gctx) })
	}
	return g.Wait()
}

// noStaticPods stands in for the sources when neither staticPodPath nor
// staticPodURL is set.
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
