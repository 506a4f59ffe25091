// Package config is the source of the pods this node runs: the
// apiserver's pods bound to the node, and the static pods of the
// manifest directory (staticPodPath).
package config

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// Handler receives pod updates. Its methods must not block.
type Handler interface {
	UpsertPod(pod *v1.Pod)
	RemovePod(pod *v1.Pod)
}

// Config configures an APISource.
type Config struct {
	// Client watches pods.
	Client kube.Interface
	// NodeName selects the pods bound here (spec.nodeName).
	NodeName string
}

// APISource watches the pods bound to this node and hands every add,
// update and removal to its handler.
type APISource struct {
	informer cache.SharedIndexInformer

	mu sync.Mutex
	// handlerSynced is nil until SetHandler, then true once the handler
	// itself has been given every pod of the first list, not merely the
	// informer's store.
	handlerSynced func() bool
	running       bool
	// mirrors is told of the mirror pods, which are not run (their static
	// pods are); nil until SetMirrorHandler.
	mirrors Handler
}

// NewAPISource builds the source; SetHandler names its handler and Run
// starts watching.
func NewAPISource(cfg Config) (*APISource, error) {
	if cfg.Client == nil || cfg.NodeName == "" {
		return nil, errors.New("config: Client and NodeName are required")
	}
	informer := kube.NewInformer(cfg.Client, cfg.Client.CoreV1().Pods(metav1.NamespaceAll), &v1.Pod{},
		func(o *metav1.ListOptions) { o.FieldSelector = podsOfNode(cfg.NodeName) })
	return &APISource{informer: informer}, nil
}

// podsOfNode is the field selector of the pods bound to the node. The
// apiserver applies it: the source never sees another node's pods.
func podsOfNode(nodeName string) string {
	return fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
}

// SetHandler names the handler given every add, update and removal. It is
// called once, before Run. The handler is not part of Config because it is
// built after the source: the pod dispatcher reads HasSynced to tell an
// orphan from a pod not listed yet, so the source exists first and the
// dispatcher subscribes to it once built.
func (s *APISource) SetHandler(h Handler) error {
	if h == nil {
		return errors.New("config: nil handler")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.running:
		return errors.New("config: SetHandler after Run")
	case s.handlerSynced != nil:
		return errors.New("config: SetHandler called twice")
	}
	reg, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { upsert(s.handlerOf(h, obj), obj) },
		UpdateFunc: func(_, obj any) { upsert(s.handlerOf(h, obj), obj) },
		DeleteFunc: func(obj any) { remove(s.handlerOf(h, obj), obj) },
	})
	if err != nil {
		return fmt.Errorf("config: add pod handler: %w", err)
	}
	s.handlerSynced = reg.HasSynced
	return nil
}

// SetMirrorHandler names the handler told of the mirror pods bound here:
// the apiserver's copies of this node's static pods, which the agent
// never runs as pods of their own. It is called at most once, before Run;
// without it mirror pods are only skipped.
func (s *APISource) SetMirrorHandler(h Handler) error {
	if h == nil {
		return errors.New("config: nil mirror handler")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.running:
		return errors.New("config: SetMirrorHandler after Run")
	case s.mirrors != nil:
		return errors.New("config: SetMirrorHandler called twice")
	}
	s.mirrors = h
	return nil
}

// handlerOf is the handler an event about obj goes to: the mirror
// handler for a mirror pod (nil when there is none), else h.
func (s *APISource) handlerOf(h Handler, obj any) Handler {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if pod, ok := obj.(*v1.Pod); ok && IsMirror(pod) {
		// Set before Run, which started the informer: no lock needed.
		return s.mirrors
	}
	return h
}

// Pod returns the pod bound here of that namespace and name as the watch
// last saw it, and whether it has one. It is shared and must not be
// modified.
func (s *APISource) Pod(namespace, name string) (*v1.Pod, bool) {
	obj, ok, err := s.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	pod, ok := obj.(*v1.Pod)
	return pod, ok
}

// MirrorPods returns the mirror pods bound here as last listed. They are
// shared and must not be modified.
func (s *APISource) MirrorPods() []*v1.Pod {
	var out []*v1.Pod
	for _, obj := range s.informer.GetStore().List() {
		if pod, ok := obj.(*v1.Pod); ok && IsMirror(pod) {
			out = append(out, pod)
		}
	}
	return out
}

func upsert(h Handler, obj any) {
	if h == nil {
		return
	}
	if pod, ok := obj.(*v1.Pod); ok {
		h.UpsertPod(pod)
	}
}

// remove hands over a deleted pod, also one whose deletion the watch
// missed (the informer then knows only its last state).
func remove(h Handler, obj any) {
	if h == nil {
		return
	}
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if pod, ok := obj.(*v1.Pod); ok {
		h.RemovePod(pod)
	}
}

// HasSynced reports whether the handler has been given every pod of the
// first list: only then is a pod in the runtime but not here an orphan.
// It is false before SetHandler.
func (s *APISource) HasSynced() bool {
	s.mu.Lock()
	synced := s.handlerSynced
	s.mu.Unlock()
	return synced != nil && synced()
}

// Run watches until ctx ends. SetHandler must have been called.
func (s *APISource) Run(ctx context.Context) error {
	s.mu.Lock()
	synced, running := s.handlerSynced, s.running
	s.running = true
	s.mu.Unlock()
	switch {
	case synced == nil:
		return errors.New("config: Run before SetHandler")
	case running:
		return errors.New("config: Run called twice")
	}
	logger := klog.FromContext(ctx).WithName("podsource")
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		if cache.WaitForCacheSync(ctx.Done(), synced) {
			logger.V(2).Info("Listed the pods bound to this node", "duration", time.Since(start))
		}
	})
	s.informer.RunWithContext(klog.NewContext(ctx, logger))
	wg.Wait()
	return nil
}
