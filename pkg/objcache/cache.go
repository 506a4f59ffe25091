// Package objcache keeps the node's view of the configMaps and secrets its
// pods reference, fed by one watch per object rather than a GET per read.
//
// Volumes are brought up to date at every volume refresh (the kubelet's
// syncFrequency, a minute by default), containers' environments read their
// configMaps and secrets when created, and image pulls read pull secrets:
// with a GET each, a node of a hundred pods sends the apiserver a hundred
// requests a minute while nothing changes. As the kubelet's Watch strategy
// (configMapAndSecretChangeDetectionStrategy), the cache instead opens,
// for each object some registered pod references, a watch on that one
// object (a field selector on metadata.name in its namespace, which the
// node authorizer allows for objects referenced by the node's pods), and
// serves reads from what the watch delivered.
//
// Lifecycle of a watch:
//   - Register(pod) starts the watches of the objects the pod references
//     that no other registered pod references; calling it again with a
//     changed spec starts and stops the difference.
//   - A read waits for the watch's first list (at most Config.SyncWait),
//     then answers from it: the object, or NotFound when it does not exist.
//     A read that the first list does not reach in time, or of an object no
//     registered pod references, is a GET, as before the cache.
//   - An immutable object's watch is stopped at its first read from the
//     watch: it cannot change, so the copy read is served from then on.
//   - Unregister(uid) stops the watches no other registered pod needs, at
//     once. The kubelet does the same; it also stops watches nothing read
//     for five resync periods (objects only environments use) and restarts
//     them at the next read. The cache does not: a watch of an object that
//     does not change costs the apiserver nothing but the open stream.
package objcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// defaultSyncWait is how long the kubelet waits for a new watch's first
// list before it gives up on a read.
const defaultSyncWait = time.Second

// minWatchTimeout keeps each object's watch open for half an hour to an
// hour before it is renewed, rather than the five to ten minutes of an
// informer: there is a watch per object, and they are many.
const minWatchTimeout = 30 * time.Minute

// Config configures a Cache.
type Config struct {
	// Client lists, watches and gets the objects. Required.
	Client kube.Interface
	// SyncWait bounds how long a read waits for a new watch's first list
	// before it GETs the object instead. Defaults to one second, the
	// kubelet's wait; the kubelet then fails the read, the cache answers
	// it as it did before it watched.
	SyncWait time.Duration
}

// Cache serves the configMaps and secrets the registered pods reference
// from a watch of each. It is safe for concurrent use. Objects it returns
// are the caller's own.
type Cache struct {
	syncWait time.Duration
	kinds    [2]kindClient // by kind
	// client tells reflectors whether it can stream a watch's first list
	// (a fake clientset cannot).
	client kube.Interface

	mu      sync.Mutex
	runCtx  context.Context // Run's, once it started
	ended   bool            // Run returned: no watch starts any more
	objects map[objectKey]*watchedObject
	pods    map[types.UID]map[objectKey]struct{}
	wg      sync.WaitGroup // the watches' goroutines

	// fetches shares one GET among the reads of an object made while it
	// is under way: a hundred pods started at once all read their
	// namespace's kube-root-ca.crt in the same second, before its new
	// watch has listed.
	fetches singleflight.Group
	// fetchJoined, when set (by tests), is called by each read once it
	// waits on a GET.
	fetchJoined func()
}

// watchedObject is one referenced object and its watch.
type watchedObject struct {
	store *objectStore
	// users counts the registered pods referencing the object.
	users int
	// immutable: the watch was stopped for good, the store holds the
	// object as it will stay.
	immutable bool
	// stop ends the watch; nil while none runs.
	stop context.CancelFunc
}

// kindClient is how one kind of object is read from the apiserver.
type kindClient struct {
	newObject func() runtime.Object
	list      func(ctx context.Context, namespace string, opts metav1.ListOptions) (runtime.Object, error)
	watch     func(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
	get       func(ctx context.Context, namespace, name string) (runtime.Object, error)
}

// New validates cfg and returns a Cache. Its watches start once Run does;
// reads before then are GETs.
func New(cfg Config) (*Cache, error) {
	if cfg.Client == nil {
		return nil, errors.New("objcache: Client is required")
	}
	if cfg.SyncWait <= 0 {
		cfg.SyncWait = defaultSyncWait
	}
	core := cfg.Client.CoreV1()
	c := &Cache{
		syncWait: cfg.SyncWait,
		client:   cfg.Client,
		objects:  map[objectKey]*watchedObject{},
		pods:     map[types.UID]map[objectKey]struct{}{},
	}
	c.kinds[configMapKind] = kindClient{
		newObject: func() runtime.Object { return &v1.ConfigMap{} },
		list: func(ctx context.Context, ns string, opts metav1.ListOptions) (runtime.Object, error) {
			return core.ConfigMaps(ns).List(ctx, opts)
		},
		watch: func(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
			return core.ConfigMaps(ns).Watch(ctx, opts)
		},
		get: func(ctx context.Context, ns, name string) (runtime.Object, error) {
			return core.ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		},
	}
	c.kinds[secretKind] = kindClient{
		newObject: func() runtime.Object { return &v1.Secret{} },
		list: func(ctx context.Context, ns string, opts metav1.ListOptions) (runtime.Object, error) {
			return core.Secrets(ns).List(ctx, opts)
		},
		watch: func(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
			return core.Secrets(ns).Watch(ctx, opts)
		},
		get: func(ctx context.Context, ns, name string) (runtime.Object, error) {
			return core.Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		},
	}
	return c, nil
}

// Run starts the watches of the objects registered so far, and of those
// registered later, until ctx ends; then it stops every watch and returns
// once they have all stopped.
func (c *Cache) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.runCtx != nil {
		c.mu.Unlock()
		return errors.New("objcache: Run called twice")
	}
	c.runCtx = ctx
	for key, obj := range c.objects {
		c.startLocked(key, obj)
	}
	c.mu.Unlock()

	<-ctx.Done()
	c.mu.Lock()
	c.ended = true
	for _, obj := range c.objects {
		obj.stopWatch()
	}
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// Register records the configMaps and secrets the pod references and
// starts watching those no other registered pod references. Call it again
// when the spec changes (an ephemeral container added): references the
// pod dropped are released. It does not block.
func (c *Cache) Register(pod *v1.Pod) {
	refs := podReferences(pod)
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.pods[pod.UID]
	for key := range refs {
		if _, ok := prev[key]; !ok {
			c.addRefLocked(key)
		}
	}
	for key := range prev {
		if _, ok := refs[key]; !ok {
			c.dropRefLocked(key)
		}
	}
	if len(refs) == 0 {
		delete(c.pods, pod.UID)
		return
	}
	c.pods[pod.UID] = refs
}

// Unregister releases the pod's references: the watches no other
// registered pod needs stop. Unknown pods are ignored.
func (c *Cache) Unregister(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.pods[uid] {
		c.dropRefLocked(key)
	}
	delete(c.pods, uid)
}

func (c *Cache) addRefLocked(key objectKey) {
	obj, ok := c.objects[key]
	if !ok {
		obj = &watchedObject{store: newObjectStore(key.name)}
		c.objects[key] = obj
		c.startLocked(key, obj)
	}
	obj.users++
}

func (c *Cache) dropRefLocked(key objectKey) {
	obj, ok := c.objects[key]
	if !ok {
		return
	}
	obj.users--
	if obj.users > 0 {
		return
	}
	obj.stopWatch()
	delete(c.objects, key)
}

// startLocked starts the object's watch when Run is running and none
// runs yet.
func (c *Cache) startLocked(key objectKey, obj *watchedObject) {
	if c.runCtx == nil || c.ended || obj.immutable || obj.stop != nil {
		return
	}
	logger := klog.LoggerWithName(klog.FromContext(c.runCtx), "objcache").WithValues(key.kind.String(), klog.KRef(key.namespace, key.name))
	ctx, cancel := context.WithCancel(klog.NewContext(c.runCtx, logger))
	obj.stop = cancel
	kc := c.kinds[key.kind]
	selector := fields.OneTermEqualSelector("metadata.name", key.name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return kc.list(ctx, key.namespace, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return kc.watch(ctx, key.namespace, opts)
		},
	}
	r := cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, c.client), kc.newObject(), obj.store, cache.ReflectorOptions{
		Name:            fmt.Sprintf("%s %s/%s", key.kind, key.namespace, key.name),
		MinWatchTimeout: minWatchTimeout,
		Logger:          &logger,
	})
	c.wg.Go(func() { r.RunWithContext(ctx) })
}

func (o *watchedObject) stopWatch() {
	if o.stop != nil {
		o.stop()
		o.stop = nil
	}
}

// GetConfigMap returns the configMap, from its watch when a registered pod
// references it; a NotFound error (`configmap "name" not found`) when it
// does not exist.
func (c *Cache) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	obj, err := c.get(ctx, objectKey{kind: configMapKind, namespace: namespace, name: name})
	if err != nil {
		return nil, err
	}
	cm, ok := obj.(*v1.ConfigMap)
	if !ok {
		return nil, fmt.Errorf("configmap %s/%s: unexpected object %T", namespace, name, obj)
	}
	return cm, nil
}

// GetSecret returns the secret, from its watch when a registered pod
// references it; a NotFound error (`secret "name" not found`) when it does
// not exist.
func (c *Cache) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	obj, err := c.get(ctx, objectKey{kind: secretKind, namespace: namespace, name: name})
	if err != nil {
		return nil, err
	}
	s, ok := obj.(*v1.Secret)
	if !ok {
		return nil, fmt.Errorf("secret %s/%s: unexpected object %T", namespace, name, obj)
	}
	return s, nil
}

func (c *Cache) get(ctx context.Context, key objectKey) (runtime.Object, error) {
	c.mu.Lock()
	obj := c.objects[key]
	c.mu.Unlock()
	if obj == nil {
		// No registered pod references it (an ephemeral container added
		// since the pod was last registered): no watch is allowed yet.
		return c.fetch(ctx, key)
	}
	if !obj.store.waitSynced(ctx, c.syncWait) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", key.kind, key.namespace, key.name, err)
		}
		klog.FromContext(ctx).V(4).Info("Watch not listed yet, reading directly", key.kind.String(), klog.KRef(key.namespace, key.name))
		return c.fetch(ctx, key)
	}
	o, ok := obj.store.get()
	if !ok {
		return nil, notFound(key)
	}
	if immutable(o) {
		c.settle(ctx, key, obj)
	}
	// The store's copy is shared by every reader.
	return o.DeepCopyObject(), nil
}

// settle stops the watch of an object found immutable: what was read is
// what it will be.
func (c *Cache) settle(ctx context.Context, key objectKey, obj *watchedObject) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if obj.immutable {
		return
	}
	obj.immutable = true
	obj.store.freeze()
	obj.stopWatch()
	klog.FromContext(ctx).V(4).Info("Stopped watching an immutable object", key.kind.String(), klog.KRef(key.namespace, key.name))
}

// fetchTimeout bounds a shared GET, which no single reader's context ends.
const fetchTimeout = time.Minute

// fetch reads the object from the apiserver, in one GET shared with the
// reads of the same object made while it is under way.
func (c *Cache) fetch(ctx context.Context, key objectKey) (runtime.Object, error) {
	ch := c.fetches.DoChan(key.kind.String()+"/"+key.namespace+"/"+key.name, func() (any, error) {
		// Not the first reader's context: its end must not fail the others.
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		defer cancel()
		return c.kinds[key.kind].get(gctx, key.namespace, key.name)
	})
	if c.fetchJoined != nil {
		c.fetchJoined()
	}
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("%s %s/%s: %w", key.kind, key.namespace, key.name, ctx.Err())
	case r := <-ch:
		if apierrors.IsNotFound(r.Err) {
			return nil, notFound(key)
		}
		if r.Err != nil {
			return nil, r.Err
		}
		o := r.Val.(runtime.Object)
		if r.Shared {
			o = o.DeepCopyObject()
		}
		return o, nil
	}
}

// notFound is the error of a missing object, worded as the kubelet's
// caches word it: `configmap "name" not found`.
func notFound(key objectKey) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: key.kind.String()}, key.name)
}

func immutable(o runtime.Object) bool {
	switch o := o.(type) {
	case *v1.ConfigMap:
		return o.Immutable != nil && *o.Immutable
	case *v1.Secret:
		return o.Immutable != nil && *o.Immutable
	}
	return false
}
