// Package config is the source of the pods this node runs: the
// apiserver's pods bound to the node (and, later, static pod manifests).
package config

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Handler receives pod updates. Its methods must not block.
type Handler interface {
	UpsertPod(pod *v1.Pod)
	RemovePod(pod *v1.Pod)
}

// Config configures an APISource.
type Config struct {
	// Client watches pods.
	Client kubernetes.Interface
	// NodeName selects the pods bound here (spec.nodeName).
	NodeName string
	// Handler gets every add, update and removal.
	Handler Handler
}

// APISource watches the pods bound to this node.
type APISource struct {
	cfg      Config
	informer cache.SharedIndexInformer
	// handlerSynced is true once the handler itself has been given every
	// pod of the first list, not merely the informer's store.
	handlerSynced func() bool
}

// NewAPISource builds the source; Run starts watching.
func NewAPISource(cfg Config) (*APISource, error) {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.Handler == nil {
		return nil, errors.New("config: Client, NodeName and Handler are required")
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	s := &APISource{cfg: cfg, informer: inf}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.upsert(obj) },
		UpdateFunc: func(_, obj any) { s.upsert(obj) },
		DeleteFunc: s.remove,
	})
	if err != nil {
		return nil, err
	}
	s.handlerSynced = reg.HasSynced
	return s, nil
}

func (s *APISource) upsert(obj any) {
	if pod, ok := obj.(*v1.Pod); ok {
		s.cfg.Handler.UpsertPod(pod)
	}
}

func (s *APISource) remove(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if pod, ok := obj.(*v1.Pod); ok {
		s.cfg.Handler.RemovePod(pod)
	}
}

// HasSynced reports whether the handler has been given every pod of the
// first list: only then is a pod in the runtime but not here an orphan.
func (s *APISource) HasSynced() bool { return s.handlerSynced() }

// Run watches until ctx ends.
func (s *APISource) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("podsource")
	go func() {
		start := time.Now()
		if cache.WaitForCacheSync(ctx.Done(), s.handlerSynced) {
			logger.V(2).Info("Listed the pods bound to this node", "duration", time.Since(start))
		}
	}()
	s.informer.RunWithContext(klog.NewContext(ctx, logger))
	return nil
}
