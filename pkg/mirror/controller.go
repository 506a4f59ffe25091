package mirror

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/kube"
)

// DefaultResync is how often a pass runs without being woken while there
// is anything to keep (a static or a mirror pod), the lists are not
// complete, or the last pass failed: it catches a static pod that finished
// stopping, a Node that was registered, an apiserver that came back.
const DefaultResync = 2 * time.Second

// idleResync is how often a pass runs without being woken on a node with
// neither static nor mirror pods, where the pod sources' wake-ups say all.
const idleResync = time.Minute

// Config configures a Controller.
type Config struct {
	// Client creates and deletes mirror pods and reads the Node, whose
	// UID the owner references carry.
	Client kube.Interface
	// NodeName is this node.
	NodeName string
	// StaticPods are the static pods this node runs (the file source's).
	StaticPods func() []*v1.Pod
	// MirrorPods are the mirror pods the apiserver holds for this node,
	// as the pod source last listed them.
	MirrorPods func() []*v1.Pod
	// Listed says whether both lists are complete: the static pod
	// directory read and the mirror pods listed. No pass acts before,
	// lest it delete the mirror pods of static pods not read yet, or make
	// mirror pods that exist already.
	Listed func() bool
	// StillRunning says whether a static pod of that namespace and name
	// has not finished stopping; nil means none has.
	StillRunning func(namespace, name string) bool
	// Resync defaults to DefaultResync.
	Resync time.Duration
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// Controller keeps the mirror pods of this node's static pods.
type Controller struct {
	cfg  Config
	wake chan struct{}
	// idle: the last pass found the lists complete and neither a static
	// nor a mirror pod (Run's goroutine only).
	idle bool
}

// New validates cfg and builds a Controller.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.StaticPods == nil || cfg.MirrorPods == nil || cfg.Listed == nil {
		return nil, errors.New("mirror: Client, NodeName, StaticPods, MirrorPods and Listed are required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Controller{cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// Wake asks for a pass soon. It never blocks.
func (c *Controller) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// UpsertPod wakes the controller: a static or a mirror pod appeared or
// changed. With RemovePod it makes the Controller a pod source's handler.
func (c *Controller) UpsertPod(*v1.Pod) { c.Wake() }

// RemovePod wakes the controller: a static or a mirror pod is gone.
func (c *Controller) RemovePod(*v1.Pod) { c.Wake() }

// Run keeps the mirror pods until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("mirror")
	ctx = klog.NewContext(ctx, logger)
	wait := c.cfg.Resync
	for {
		t := c.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-c.wake:
			t.Stop()
		case <-t.C():
		}
		err := c.pass(ctx)
		if err != nil {
			logger.Info("Mirror pods not in step yet, will retry", "err", err.Error())
		}
		wait = c.nextPass(err)
	}
}

// nextPass is how long until a pass without a wake-up, after a pass that
// ended with err.
func (c *Controller) nextPass(err error) time.Duration {
	if err != nil || !c.idle {
		return c.cfg.Resync
	}
	return max(c.cfg.Resync, idleResync)
}

// pass plans from what is known now and carries the plan out.
func (c *Controller) pass(ctx context.Context) error {
	c.idle = false
	if !c.cfg.Listed() {
		return nil
	}
	static, mirrors := c.cfg.StaticPods(), c.cfg.MirrorPods()
	c.idle = len(static) == 0 && len(mirrors) == 0
	actions := plan(static, mirrors, c.cfg.StillRunning)
	if len(actions) == 0 {
		return nil
	}
	var errs []error
	var node *v1.Node
	for _, a := range actions {
		if a.create == nil {
			errs = append(errs, c.delete(ctx, a))
			continue
		}
		if node == nil {
			n, err := c.cfg.Client.CoreV1().Nodes().Get(ctx, c.cfg.NodeName, metav1.GetOptions{})
			if err != nil {
				// No Node yet (or no apiserver): the owner reference needs its UID.
				return errors.Join(append(errs, fmt.Errorf("get node: %w", err))...)
			}
			if n.DeletionTimestamp != nil {
				// As the kubelet: no mirror pods for a Node on its way out.
				return errors.Join(errs...)
			}
			node = n
		}
		errs = append(errs, c.create(ctx, a, node))
	}
	return errors.Join(errs...)
}

func (c *Controller) create(ctx context.Context, a action, node *v1.Node) error {
	m := mirrorOf(a.create, node.Name, node.UID)
	_, err := c.cfg.Client.CoreV1().Pods(m.Namespace).Create(ctx, m, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier pass the list has not shown yet, or an old
		// one whose deletion is in flight: the next pass looks again.
		return nil
	}
	if err != nil {
		return fmt.Errorf("create mirror pod %s: %w", a.name(), err)
	}
	klog.FromContext(ctx).V(2).Info("Created mirror pod", "pod", klog.KObj(m), "hash", m.Annotations[config.AnnotationMirror])
	return nil
}

// delete removes a mirror pod at once (grace 0), only the one planned on:
// a mirror pod made since, with another UID, is left alone.
func (c *Controller) delete(ctx context.Context, a action) error {
	grace := int64(0)
	uid := a.deleteUID
	err := c.cfg.Client.CoreV1().Pods(a.deleteNS).Delete(ctx, a.deleteName, metav1.DeleteOptions{
		GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete mirror pod %s: %w", a.name(), err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted mirror pod", "pod", klog.KRef(a.deleteNS, a.deleteName), "podUID", a.deleteUID, "reason", a.why)
	return nil
}
