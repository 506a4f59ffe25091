package imagegc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/metrics"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/stats"
)

// DefaultPeriod is how often images are collected: the kubelet's
// ImageGCPeriod. The first collection comes at start, as the kubelet's.
const DefaultPeriod = 5 * time.Minute

// The kubelet's event reasons, on the Node.
const (
	// ReasonImageGCFailed: a collection failed, and the one before too.
	ReasonImageGCFailed = "ImageGCFailed"
	// ReasonFreeDiskSpaceFailed: the unused images were not enough to
	// bring the image filesystem down to the low threshold.
	ReasonFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	// ReasonInvalidDiskCapacity: the image filesystem's size is unknown.
	ReasonInvalidDiskCapacity = "InvalidDiskCapacity"
)

// Runtime is what collection asks of the container runtime
// (*runtime.Client).
type Runtime interface {
	ListImages(ctx context.Context) ([]*runtimeapi.Image, error)
	RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error
	// ListContainers and ContainerStatus tell which images are in use:
	// those containers were made from, and those they mount as volumes.
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
}

var _ Runtime = (*runtime.Client)(nil)

// ImageFs measures the runtime's image filesystem (*stats.Provider).
type ImageFs interface {
	// ImageFsStats reports the filesystem's capacity and available
	// bytes, as statfs sees them.
	ImageFsStats(ctx context.Context) (*statsapi.FsStats, error)
}

var _ ImageFs = (*stats.Provider)(nil)

// Recorder records events (record.EventRecorder).
type Recorder interface {
	Eventf(object kruntime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// Metrics counts removed images (*metrics.Metrics).
type Metrics interface {
	ObserveImageGarbageCollected(reason string)
}

var _ Metrics = (*metrics.Metrics)(nil)

// Config configures a Collector.
type Config struct {
	// Runtime is where images are listed and removed. Required.
	Runtime Runtime
	// ImageFs measures the image filesystem. Required.
	ImageFs ImageFs
	// Recorder records the events of failed collections on Node.
	// Required.
	Recorder Recorder
	// Node is the reference the events are about. Required.
	Node *v1.ObjectReference
	// Policy defaults to DefaultPolicy when zero.
	Policy Policy
	// Period defaults to DefaultPeriod.
	Period time.Duration
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Metrics, when set, counts removed images.
	Metrics Metrics
}

// Collector removes unused images every Period, and on request.
type Collector struct {
	cfg Config
	// started is when the collector was made: the kubelet's start of
	// image GC, from which the maximum age applies.
	started time.Time

	// mu makes collections and DeleteUnusedImages run one at a time,
	// and guards records.
	mu sync.Mutex
	// records are the images seen since start, by ID.
	records map[string]record
}

// New validates cfg and returns a Collector.
func New(cfg Config) (*Collector, error) {
	if cfg.Runtime == nil || cfg.ImageFs == nil || cfg.Recorder == nil || cfg.Node == nil {
		return nil, errors.New("imagegc: Runtime, ImageFs, Recorder and Node are required")
	}
	if cfg.Policy == (Policy{}) {
		cfg.Policy = DefaultPolicy
	}
	if err := cfg.Policy.validate(); err != nil {
		return nil, fmt.Errorf("imagegc: %w", err)
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Collector{cfg: cfg, started: cfg.Clock.Now(), records: map[string]record{}}, nil
}

// Run collects now and every period until ctx ends. A collection that
// fails twice in a row or more is reported as an ImageGCFailed event on
// the Node, each time, as the kubelet does. With the high threshold at
// 100% and no maximum age it removes nothing, as the kubelet, but still
// keeps track of the images, so that DeleteUnusedImages knows their ages.
func (c *Collector) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("imagegc")
	ctx = klog.NewContext(ctx, logger)
	periodic := c.cfg.Policy.periodic()
	if !periodic {
		logger.V(2).Info("Image garbage collection is off: imageGCHighThresholdPercent is 100 and imageMaximumGCAge is 0")
	}
	t := c.cfg.Clock.NewTicker(c.cfg.Period)
	defer t.Stop()
	failedBefore := false
	for {
		if periodic {
			err := c.Collect(ctx)
			if ctx.Err() != nil {
				return nil
			}
			failedBefore = c.report(ctx, err, failedBefore)
		} else if err := c.observe(ctx); err != nil && ctx.Err() == nil {
			logger.Info("Failed to monitor images", "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// report logs a collection's outcome and records the event of a repeated
// failure; it returns whether the collection failed.
func (c *Collector) report(ctx context.Context, err error, failedBefore bool) bool {
	logger := klog.FromContext(ctx)
	switch {
	case err != nil && failedBefore:
		logger.Error(err, "Image garbage collection failed multiple times in a row")
		c.cfg.Recorder.Eventf(c.cfg.Node, v1.EventTypeWarning, ReasonImageGCFailed, "%s", err.Error())
	case err != nil:
		logger.Error(err, "Image garbage collection failed once, will retry")
	case failedBefore:
		logger.V(1).Info("Image garbage collection succeeded")
	default:
		logger.V(4).Info("Image garbage collection succeeded")
	}
	return err != nil
}

// Collect runs one collection: it removes the images unused for longer
// than the maximum age, then, with the image filesystem at the high
// threshold or above, unused images down to the low threshold. It
// records a FreeDiskSpaceFailed event when the images it may remove are
// not enough, and an InvalidDiskCapacity one when the filesystem's size
// is unknown.
func (c *Collector) Collect(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	logger := klog.FromContext(ctx)
	now := c.cfg.Clock.Now()
	order, err := c.detect(ctx, now)
	if err != nil {
		return err
	}
	policy := c.cfg.Policy
	old, rest := expired(order, now, c.started, policy.MaxAge)
	var errs []error
	for _, img := range old {
		if err := c.remove(ctx, img, metrics.ImageGCReasonAge); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("wanted to free images older than %v, encountered errors in image deletion: %w", policy.MaxAge, errors.Join(errs...))
	}

	fs, err := c.imageFs(ctx)
	if err != nil {
		return err
	}
	usage, need := toFree(fs, policy)
	if need <= 0 {
		return nil
	}
	logger.Info("Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold",
		"usage", usage, "highThreshold", policy.HighThresholdPercent, "amountToFree", need, "lowThreshold", policy.LowThresholdPercent)
	freed, err := c.free(ctx, freeable(rest, now, policy.MinAge), need)
	if err != nil {
		return err
	}
	if freed < need {
		msg := fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
			"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
			"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
			usage, formatSize(fs.capacity), freed)
		c.cfg.Recorder.Eventf(c.cfg.Node, v1.EventTypeWarning, ReasonFreeDiskSpaceFailed, "%s", msg)
		return errors.New(msg)
	}
	return nil
}

// DeleteUnusedImages removes every image that may go to free space (not
// in use, not pinned, first seen at least the minimum age ago), whatever
// the disk usage: what the kubelet's eviction manager asks of image GC
// under disk pressure, before it evicts pods.
func (c *Collector) DeleteUnusedImages(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	klog.FromContext(ctx).Info("Attempting to delete unused images")
	now := c.cfg.Clock.Now()
	order, err := c.detect(ctx, now)
	if err != nil {
		return err
	}
	_, err = c.free(ctx, freeable(order, now, c.cfg.Policy.MinAge), math.MaxInt64)
	return err
}

// observe updates the records without removing anything.
func (c *Collector) observe(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.detect(ctx, c.cfg.Clock.Now())
	return err
}

// detect looks at the runtime's images and containers, updates the
// records and returns the images that may be removed, in eviction order.
// The images are listed first: one pulled for a container made in
// between is seen in use.
func (c *Collector) detect(ctx context.Context, now time.Time) ([]candidate, error) {
	rt := c.cfg.Runtime
	images, err := rt.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	containers, err := rt.ListContainers(ctx, nil)
	if err != nil {
		return nil, err
	}
	refs := map[string]bool{}
	for _, ctr := range containers {
		for _, ref := range []string{ctr.GetImageId(), ctr.GetImageRef(), ctr.GetImage().GetImage()} {
			if ref != "" {
				refs[ref] = true
			}
		}
		mounted, err := c.mountedImages(ctx, ctr.GetId())
		if err != nil {
			return nil, err
		}
		for _, ref := range mounted {
			refs[ref] = true
		}
	}
	records, inUse := track(c.records, images, refs, now)
	c.records = records
	klog.FromContext(ctx).V(4).Info("Images detected", "images", len(records), "inUse", len(inUse))
	return evictionOrder(records, inUse), nil
}

// mountedImages returns the images a container mounts as image volumes;
// only its status tells. A container removed meanwhile mounts nothing.
func (c *Collector) mountedImages(ctx context.Context, containerID string) ([]string, error) {
	resp, err := c.cfg.Runtime.ContainerStatus(ctx, containerID, false)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image volumes of container %s: %w", containerID, err)
	}
	var out []string
	for _, m := range resp.GetStatus().GetMounts() {
		if ref := m.GetImage().GetImage(); ref != "" {
			out = append(out, ref)
		}
	}
	return out, nil
}

// imageFs reads the image filesystem's size and free space. A size of
// zero cannot be collected against: an InvalidDiskCapacity event says
// so, as the kubelet's does.
func (c *Collector) imageFs(ctx context.Context) (fsUsage, error) {
	st, err := c.cfg.ImageFs.ImageFsStats(ctx)
	if err != nil {
		return fsUsage{}, err
	}
	var fs fsUsage
	if st.CapacityBytes != nil {
		fs.capacity = int64(*st.CapacityBytes)
	}
	if st.AvailableBytes != nil {
		fs.available = int64(*st.AvailableBytes)
	}
	if fs.capacity <= 0 {
		err := errors.New("invalid capacity 0 on image filesystem")
		c.cfg.Recorder.Eventf(c.cfg.Node, v1.EventTypeWarning, ReasonInvalidDiskCapacity, "%s", err.Error())
		return fsUsage{}, err
	}
	return fs, nil
}

// free removes images of eligible, in order, until need bytes are freed.
// A removal that fails is passed over (the next image may do) and
// reported; it frees nothing.
func (c *Collector) free(ctx context.Context, eligible []candidate, need int64) (int64, error) {
	var freed int64
	var errs []error
	for _, img := range eligible {
		if ctx.Err() != nil {
			return freed, ctx.Err()
		}
		if err := c.remove(ctx, img, metrics.ImageGCReasonSpace); err != nil {
			errs = append(errs, err)
			continue
		}
		freed += int64(img.size)
		if freed >= need {
			break
		}
	}
	if len(errs) > 0 {
		return freed, fmt.Errorf("wanted to free %d bytes, but freed %d bytes space with errors in image deletion: %w", need, freed, errors.Join(errs...))
	}
	return freed, nil
}

// remove removes an image and forgets it. One the runtime no longer has
// is removed.
func (c *Collector) remove(ctx context.Context, img candidate, reason string) error {
	klog.FromContext(ctx).Info("Removing image to free bytes", "imageID", img.id, "size", img.size,
		"runtimeHandler", img.runtimeHandler, "reason", reason)
	err := c.cfg.Runtime.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: img.id, RuntimeHandler: img.runtimeHandler})
	if err != nil && !notFound(err) {
		return err
	}
	delete(c.records, img.id)
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.ObserveImageGarbageCollected(reason)
	}
	return nil
}

// notFound: the runtime does not know the object.
func notFound(err error) bool {
	return err != nil && grpcstatus.Code(err) == codes.NotFound
}
