package kube

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListerWatcher lists and watches one resource.
type ListerWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// NewInformer is a shared informer of r's objects (example is one of
// them), indexed by namespace like client-go's generated informers, with
// no resync. tweak, if not nil, edits every list and watch request (a
// field selector). client tells whether the server side streams the
// initial list (a fake does not).
func NewInformer[L runtime.Object](client Interface, r ListerWatcher[L], example runtime.Object, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if tweak != nil {
				tweak(&opts)
			}
			return r.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			if tweak != nil {
				tweak(&opts)
			}
			return r.Watch(ctx, opts)
		},
	}
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), example, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// Start runs the informers until ctx ends; the function it returns waits
// for them to have stopped.
func Start(ctx context.Context, informers ...cache.SharedIndexInformer) (wait func()) {
	var wg sync.WaitGroup
	for _, inf := range informers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
	return wg.Wait
}
