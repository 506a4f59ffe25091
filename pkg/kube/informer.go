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
// initial list (a fake does not). The objects are kept without their
// managedFields (StripManagedFields).
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
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), example, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := inf.SetTransform(StripManagedFields); err != nil {
		panic(err) // only once the informer has started
	}
	return inf
}

// StripManagedFields drops an object's managedFields, the server-side
// apply bookkeeping nothing in the agent reads: a pod's are a few
// kilobytes of JSON field sets (its creator's, the scheduler's, the
// agent's own status patches), kept for every pod of the node and copied
// with it. Deletion tombstones pass through.
func StripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if om := m.GetObjectMeta(); om != nil {
			om.SetManagedFields(nil)
		}
	}
	return obj, nil
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
