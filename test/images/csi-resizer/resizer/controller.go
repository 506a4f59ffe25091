// Package resizer grows the volumes of a CSI driver when their claims ask for more
// storage: the project's stand-in for external-resizer (kubernetes-csi, v2.2.0), as the
// upstream CSI Mock specs deploy it, with RecoverVolumeExpansionFailure.
//
// A claim is taken up when it is bound to a CSI PV of the driver and requests more than
// its status.capacity (the apiserver's admission has already checked that its
// StorageClass allows expansion). planResize decides, from the claim, its PV and what
// earlier passes learned, the size to grow to; the Controller then records it on the
// claim (allocatedResources, the resize status ControllerResizeInProgress, the Resizing
// condition), calls ControllerExpandVolume (nothing for a node-only driver), writes the
// PV's new capacity, and leaves the claim either to the node (NodeResizePending, the
// FileSystemResizePending condition) or finished (status.capacity, no resize status).
// A final error leaves a ControllerResizeError condition, and an infeasible one (invalid
// argument, out of range, not found) the status ControllerResizeInfeasible, under which
// the user may lower the request to recover. Events on the claim carry external-resizer's
// reasons.
//
// Claims are worked on from a rate-limited work queue, the ecosystem's shape for a
// controller: one worker at a time per claim, failures retried with exponential back-off
// (RetryIntervalStart doubling up to RetryIntervalMax), and an infeasible size tried again
// only after RetryIntervalMax unless the request changes. A decision taken on the
// informers' cache is taken again on the claim and PV as the apiserver has them before
// anything is written, so that the cache lagging behind the controller's own writes does
// not grow a volume twice.
//
// Not here: upstream's modify controller (VolumeAttributesClass), CSI migration of in-tree
// volumes, and metrics.
package resizer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Config says which driver's volumes to grow and how.
type Config struct {
	// Client reaches the apiserver.
	Client kubernetes.Interface
	// Driver is the CSI driver (Discover).
	Driver Driver
	// Expander is the driver's controller service; required with
	// Driver.ControllerExpansion, unused without.
	Expander ControllerExpander
	// Timeout bounds each ControllerExpandVolume call. Default 10s.
	Timeout time.Duration
	// Workers is how many claims are worked on at once. Default 10.
	Workers int
	// ResyncPeriod is how often every claim is looked at again. Default 10m.
	ResyncPeriod time.Duration
	// RetryIntervalStart is the first wait after a failed pass over a claim; it doubles
	// with each failure up to RetryIntervalMax. Defaults 1s and 5m.
	RetryIntervalStart, RetryIntervalMax time.Duration
	// AnnotateFsResize: a PV whose file system the node is still to grow keeps the claim's
	// capacity from before in volume.alpha.kubernetes.io/pre-resize-capacity, until the
	// claim's capacity catches up (the feature gate of that name).
	AnnotateFsResize bool
	// HandleVolumeInUse: after the driver refused to grow a volume in use
	// (FailedPrecondition), the claim waits until no pod uses it; this watches pods.
	HandleVolumeInUse bool
	// Clock is the time source of the back-offs and the infeasible wait. Default: the
	// real clock.
	Clock clock.WithTicker
}

// Controller grows the volumes of one CSI driver.
type Controller struct {
	cfg       Config
	factory   informers.SharedInformerFactory
	claims    corelisters.PersistentVolumeClaimLister
	volumes   corelisters.PersistentVolumeLister
	pods      cache.Indexer // nil without HandleVolumeInUse
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	events    record.EventBroadcaster
	recorder  record.EventRecorder
	histories histories
	inUse     inUseClaims
}

// New validates cfg, fills its defaults and sets up the informers the Controller needs.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("no Kubernetes client")
	case cfg.Driver.Name == "":
		return nil, errors.New("no driver name")
	case cfg.Driver.ControllerExpansion && cfg.Expander == nil:
		return nil, errors.New("a driver with controller expansion needs an expander")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 10
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = 10 * time.Minute
	}
	if cfg.RetryIntervalStart <= 0 {
		cfg.RetryIntervalStart = time.Second
	}
	if cfg.RetryIntervalMax <= 0 {
		cfg.RetryIntervalMax = 5 * time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}

	c := &Controller{cfg: cfg, factory: informers.NewSharedInformerFactory(cfg.Client, cfg.ResyncPeriod)}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.RetryIntervalStart, cfg.RetryIntervalMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: cfg.Driver.Name + "-pvc", Clock: cfg.Clock})
	c.events = record.NewBroadcaster()
	c.recorder = c.events.NewRecorder(scheme.Scheme, v1.EventSource{Component: "external-resizer " + cfg.Driver.Name})

	pvcs := c.factory.Core().V1().PersistentVolumeClaims()
	reg, err := pvcs.Informer().AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.PersistentVolumeClaim)
			n, ok2 := cur.(*v1.PersistentVolumeClaim)
			if ok1 && ok2 && claimChanged(o, n) {
				c.enqueue(cur)
			}
		},
		DeleteFunc: c.forget,
	}, cfg.ResyncPeriod)
	if err != nil {
		return nil, err
	}
	c.claims = pvcs.Lister()
	pvs := c.factory.Core().V1().PersistentVolumes()
	c.volumes = pvs.Lister()
	c.synced = []cache.InformerSynced{reg.HasSynced, pvs.Informer().HasSynced}
	if cfg.HandleVolumeInUse {
		pods := c.factory.Core().V1().Pods().Informer()
		if err := pods.AddIndexers(cache.Indexers{byClaimIndex: podClaims}); err != nil {
			return nil, err
		}
		c.pods = pods.GetIndexer()
		c.synced = append(c.synced, pods.HasSynced)
	}
	return c, nil
}

// Run works on claims until ctx ends, then waits for its workers and informers to stop.
// A Controller runs once.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("driver", c.cfg.Driver.Name)
	ctx = klog.NewContext(ctx, logger)
	c.events.StartStructuredLogging(4)
	c.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.cfg.Client.CoreV1().Events("")})
	defer c.events.Shutdown()
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	defer c.queue.ShutDown()

	logger.Info("Starting the resizer", "controllerExpansion", c.cfg.Driver.ControllerExpansion, "workers", c.cfg.Workers)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("list claims and volumes: %w", context.Cause(ctx))
	}
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	logger.Info("Resizer stopped")
	return nil
}

// next works on one claim from the queue; false once the queue is shut down.
func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.sync(ctx, key)
	if wait, ok := asRetryLater(err); ok {
		klog.FromContext(ctx).V(4).Info("Waiting before the next try", "pvc", key, "reason", wait.why, "after", wait.after)
		c.queue.AddAfter(key, wait.after)
		return true
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Resizing failed; retrying", "pvc", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// forget drops what was learned of a deleted claim.
func (c *Controller) forget(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.queue.Forget(key)
	c.histories.set(key, history{})
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if pvc, ok := obj.(*v1.PersistentVolumeClaim); ok {
		c.inUse.set(pvc.UID, false)
	}
}

// histories holds the history of each claim (by key); workers of different claims share it.
type histories struct {
	mu sync.Mutex
	m  map[string]history
}

func (h *histories) get(key string) history {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[key]
}

// set records h for key; an empty history is forgotten.
func (h *histories) set(key string, v history) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v == (history{}) {
		delete(h.m, key)
		return
	}
	if h.m == nil {
		h.m = map[string]history{}
	}
	h.m[key] = v
}
