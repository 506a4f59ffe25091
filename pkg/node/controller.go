package node

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Registration retries start fast, so the node appears within seconds of
// the apiserver coming up, and back off to this ceiling.
const (
	registerRetryInitial = 100 * time.Millisecond
	registerRetryMax     = 7 * time.Second
)

// While the agent starts, a node not yet Ready is looked at every
// startupStatusPeriod rather than every StatusUpdateFrequency, for up to
// startupReadyWindow, so that it turns Ready within a moment of being
// ready, as the kubelet's start does; a restarted agent's node is
// otherwise NotReady for a whole status period.
const (
	startupStatusPeriod = 500 * time.Millisecond
	startupReadyWindow  = 2 * time.Minute
	// watchCatchUp is how long after a request to the apiserver failed the
	// watched Node is not trusted. The watch's reflector retries with a
	// backoff of up to 30 s and as much again of jitter (client-go's, not
	// settable on a shared informer), so for up to a minute after the
	// apiserver's return the watch may lack what was written meanwhile: the
	// node lifecycle controller's Ready Unknown, which a status computed from
	// the stale Node would never undo. Meanwhile the Node is read with a GET,
	// as the kubelet reads it for every status update.
	watchCatchUp = 2 * time.Minute
)

// machineRefresh is how long the host's facts (CPUs, memory, huge pages,
// the root dir's filesystem size, identity, kernel, OS) are reused between
// status updates. They change with a reboot, a resized VM or huge pages
// reserved anew; the kubelet reads them once at its start (cAdvisor's
// machine info), and reading them every 10 s was half of an idle node's
// status update.
const machineRefresh = 5 * time.Minute

// The runtime's version is read again after machineRefresh too, or once
// the runtime answers after it did not; its images every imageListRefresh,
// the period of the kubelet's image list for the node status.
const imageListRefresh = 30 * time.Second

// Controller registers the Node and keeps its status and Lease current,
// and hands the runtime the Node's pod CIDR.
type Controller struct {
	cfg     Config
	health  runtimeHealth
	lease   *leaseRenewer
	podCIDR *podCIDRSyncer

	// registered is false until the Node exists, and again after it was deleted.
	registered bool
	lastReport time.Time
	// machine are the host's facts as last read, at machineReadAt; so are
	// the runtime's version and its images.
	machine       Machine
	machineReadAt time.Time
	version       *runtimeapi.VersionResponse
	versionReadAt time.Time
	images        []*runtimeapi.Image
	imagesReadAt  time.Time
	// reportedReady: the last status written, or found current, said Ready.
	reportedReady bool
	// apiFailedAt is when a request to the apiserver (a Lease renewal, a
	// status read or write) last failed, in Unix nanoseconds; 0 when none has.
	apiFailedAt atomic.Int64

	mu  sync.Mutex
	uid types.UID // the registered Node's UID, read by the lease renewer
	// addrs are the addresses last observed, read by the serving
	// certificate's requests.
	addrs []v1.NodeAddress

	// resources are the capacity and allocatable, read from the machine once.
	resources func() machineResources
}

// machineResources are what pods may use here; both nil when the machine
// could not be read.
type machineResources struct {
	capacity, allocatable v1.ResourceList
}

// New validates cfg and builds a Controller.
func New(cfg Config) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	c := &Controller{cfg: cfg, health: runtimeHealth{downAfter: cfg.RuntimeDownAfter}}
	c.resources = sync.OnceValue(c.readResources)
	c.lease = &leaseRenewer{
		client:          cfg.Client,
		clock:           cfg.Clock,
		nodeName:        cfg.NodeName,
		durationSeconds: cfg.LeaseDurationSeconds,
		nodeUID:         c.nodeUID,
		failed:          c.apiFailed,
	}
	c.podCIDR = &podCIDRSyncer{
		getNode: c.getNode,
		runtime: cfg.Runtime,
		clock:   cfg.Clock,
		period:  cfg.PodCIDRPollPeriod,
	}
	return c, nil
}

// getNode reads this node's Node from the watch when it has it, else from
// the apiserver. The caller must not modify what it returns.
func (c *Controller) getNode(ctx context.Context) (*v1.Node, error) {
	if c.cfg.Watched != nil && c.watchTrusted() {
		if n, err := c.cfg.Watched(); err == nil && n != nil {
			return n, nil
		}
	}
	return c.cfg.Client.CoreV1().Nodes().Get(ctx, c.cfg.NodeName, metav1.GetOptions{})
}

// apiFailed records that a request to the apiserver failed just now.
func (c *Controller) apiFailed() {
	c.apiFailedAt.Store(c.cfg.Clock.Now().UnixNano())
}

// watchTrusted says whether the watched Node can stand for the apiserver's:
// no request has failed within watchCatchUp.
func (c *Controller) watchTrusted() bool {
	at := c.apiFailedAt.Load()
	return at == 0 || c.cfg.Clock.Since(time.Unix(0, at)) >= watchCatchUp
}

func (c *Controller) nodeUID() types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.uid
}

func (c *Controller) setNodeUID(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uid = uid
}

// Run registers the Node, then keeps its status and Lease current and
// its pod CIDR handed to the runtime until ctx ends. It returns once every
// loop has stopped.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", klog.KRef("", c.cfg.NodeName))
	ctx = klog.NewContext(ctx, logger)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.lease.run(ctx)
	}()
	go func() {
		defer wg.Done()
		c.podCIDR.run(ctx)
	}()

	retry := registerRetryInitial
	started := c.cfg.Clock.Now()
	for {
		wait := c.cfg.StatusUpdateFrequency
		if err := c.sync(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Failed to sync node status")
		}
		switch {
		case !c.registered:
			wait, retry = retry, min(retry*2, registerRetryMax)
		case !c.reportedReady && c.cfg.Clock.Since(started) < startupReadyWindow:
			wait, retry = min(wait, startupStatusPeriod), registerRetryInitial
		default:
			retry = registerRetryInitial
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-c.cfg.Clock.After(wait):
		}
	}
}

// sync observes the host and runtime once, then registers the Node or
// brings its status up to date.
func (c *Controller) sync(ctx context.Context) error {
	obs, err := c.observe(ctx)
	if err != nil {
		return err
	}
	now := metav1.NewTime(c.cfg.Clock.Now())
	if !c.registered {
		err = c.register(ctx, obs, now)
	} else {
		err = c.updateStatus(ctx, obs, now)
	}
	if err == nil {
		c.reportedReady = obs.notReady == nil
	}
	return err
}

// observe gathers everything the status is computed from. A runtime that
// does not answer is an observation, not an error.
func (c *Controller) observe(ctx context.Context) (observation, error) {
	logger := klog.FromContext(ctx)
	var obs observation
	var err error
	if obs.machine, err = c.machineFacts(); err != nil {
		return obs, fmt.Errorf("read machine info: %w", err)
	}
	if obs.addresses, err = c.addresses(); err != nil {
		return obs, err
	}
	c.mu.Lock()
	c.addrs = obs.addresses
	c.mu.Unlock()

	if c.cfg.VolumesInUse != nil {
		obs.volumesInUse = c.cfg.VolumesInUse()
	}
	if c.cfg.Pressure != nil {
		obs.pressure = c.cfg.Pressure.Conditions()
	}

	rctx, cancel := context.WithTimeout(ctx, c.cfg.RuntimeCallTimeout)
	defer cancel()
	obs.status, err = c.cfg.Runtime.Status(rctx)
	c.health.observe(c.cfg.Clock.Now(), obs.status, err)
	now := c.cfg.Clock.Now()
	if err != nil {
		logger.Error(err, "Container runtime status check failed")
		// Back, it may be another version.
		c.version = nil
	} else {
		if c.version == nil || now.Sub(c.versionReadAt) >= machineRefresh {
			if c.version, err = c.cfg.Runtime.Version(rctx); err != nil {
				logger.Error(err, "Container runtime version check failed")
			}
			c.versionReadAt = now
		}
		obs.version = c.version
		if c.images == nil || now.Sub(c.imagesReadAt) >= imageListRefresh {
			if c.images, err = c.cfg.Runtime.ListImages(rctx); err != nil {
				logger.Error(err, "Failed to list images for node status")
			}
			c.imagesReadAt = now
		}
		obs.images = c.images
	}
	var failed []error
	for _, hc := range c.cfg.HealthChecks {
		if err := hc.Check(); err != nil {
			failed = append(failed, fmt.Errorf("%s is not healthy: %w", hc.Name, err))
		}
	}
	obs.notReady = c.health.notReady(c.cfg.Clock.Now(), failed...)
	return obs, nil
}

// machineFacts are the host's facts, read again once machineRefresh has
// passed since the last read.
func (c *Controller) machineFacts() (Machine, error) {
	now := c.cfg.Clock.Now()
	if !c.machineReadAt.IsZero() && now.Sub(c.machineReadAt) < machineRefresh {
		return c.machine, nil
	}
	m, err := c.cfg.Host.Read()
	if err != nil {
		return m, err
	}
	c.machine, c.machineReadAt = m, now
	return m, nil
}

// Addresses are the node's addresses as its status last reported them;
// nil before the first observation. The caller must not modify them.
func (c *Controller) Addresses() []v1.NodeAddress {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs
}

func (c *Controller) addresses() ([]v1.NodeAddress, error) {
	ips := c.cfg.NodeIPs
	if len(ips) == 0 {
		ip, err := c.cfg.DetectNodeIP()
		if err != nil {
			return nil, fmt.Errorf("detect node IP (set --node-ip): %w", err)
		}
		ips = []net.IP{ip}
	}
	return nodeAddresses(ips, c.cfg.Hostname), nil
}

// Allocatable returns the node's allocatable resources as its status
// reports them, read from the machine once: what pods may use in all, the
// default of a container's limits in the downward API. Nil if the machine
// cannot be read.
func (c *Controller) Allocatable() v1.ResourceList {
	return c.resources().allocatable
}

func (c *Controller) readResources() machineResources {
	m, err := c.cfg.Host.Read()
	if err != nil {
		return machineResources{}
	}
	capa := capacity(m, c.cfg.MaxPods)
	return machineResources{capacity: capa, allocatable: allocatable(capa, c.cfg.KubeReserved, c.cfg.SystemReserved, c.cfg.EvictionHard)}
}
