package resizer

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The reasons of the events on a claim, external-resizer's.
const (
	reasonResizing                 = "Resizing"
	reasonResizeFailed             = "VolumeResizeFailed"
	reasonResizeSucceeded          = "VolumeResizeSuccessful"
	reasonFileSystemResizeRequired = "FileSystemResizeRequired"
)

// sync makes one pass over the claim key (namespace/name): it plans, and carries out the
// plan. An error asks for another pass after a back-off; a retryLater, after its delay.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a claim's key; nothing to retry
	}
	pvc, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.histories.set(key, history{})
		return nil
	}
	if err != nil {
		return err
	}
	if pvc.Spec.VolumeName == "" {
		return nil
	}
	pv, err := c.volumes.Get(pvc.Spec.VolumeName)
	if err != nil {
		// Likely not in the cache yet: the claim was bound to it a moment ago.
		return fmt.Errorf("get PV %s of claim %s: %w", pvc.Spec.VolumeName, key, err)
	}
	if c.cfg.AnnotateFsResize && ownVolume(pvc, pv, c.cfg.Driver.Name) && nodeResizeDone(pvc, pv) {
		if _, ok := pv.Annotations[annPreResizeCapacity]; ok {
			cur := pv.DeepCopy()
			delete(cur.Annotations, annPreResizeCapacity)
			if pv, err = patchVolume(ctx, c.cfg.Client, pv, cur); err != nil {
				return fmt.Errorf("remove annotation %s: %w", annPreResizeCapacity, err)
			}
		}
	}

	h, now := c.histories.get(key), c.cfg.Clock.Now()
	p := planResize(pvc, pv, c.cfg.Driver.Name, c.cfg.Driver.ControllerExpansion, h, now, c.cfg.RetryIntervalMax)
	if p.action == actExpand {
		// The cache may not show this controller's own last writes yet (a PV grown a
		// moment ago would be grown again): decide again on what the apiserver has.
		pvc, pv, err = c.current(ctx, pvc)
		if pvc == nil || err != nil {
			return err
		}
		p = planResize(pvc, pv, c.cfg.Driver.Name, c.cfg.Driver.ControllerExpansion, h, now, c.cfg.RetryIntervalMax)
	}
	c.histories.set(key, p.history)
	switch p.action {
	case actNone:
		return nil
	case actWait:
		return &retryLater{after: p.delay, why: fmt.Sprintf("expansion of claim %s to %s was found infeasible", key, p.size.String())}
	}
	logger := klog.FromContext(ctx).WithValues("pvc", klog.KObj(pvc), "pv", pv.Name, "size", p.size.String())
	logger.V(2).Info("Expanding the volume", "newStatus", p.newStatus)
	return c.expand(klog.NewContext(ctx, logger), key, pvc, pv, p)
}

// current reads the claim and its PV from the apiserver; a nil claim when it is gone.
func (c *Controller) current(ctx context.Context, cached *v1.PersistentVolumeClaim) (*v1.PersistentVolumeClaim, *v1.PersistentVolume, error) {
	pvc, err := c.cfg.Client.CoreV1().PersistentVolumeClaims(cached.Namespace).Get(ctx, cached.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get claim %s/%s: %w", cached.Namespace, cached.Name, err)
	}
	if pvc.Spec.VolumeName == "" {
		return nil, nil, nil
	}
	pv, err := c.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("get PV %s: %w", pvc.Spec.VolumeName, err)
	}
	return pvc, pv, nil
}

// expand grows pv to the plan's size and records each step on the claim and the PV.
func (c *Controller) expand(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, p plan) error {
	// The claim's capacity before the expansion, for the pre-resize annotation.
	oldSize := pvc.Status.Capacity[v1.ResourceStorage]
	pvc, err := patchClaim(ctx, c.cfg.Client, pvc, resizeStarted(pvc, p.size, p.newStatus, c.now()), true)
	if err != nil {
		return fmt.Errorf("mark claim %s as resizing: %w", key, err)
	}
	if c.pods != nil && c.inUse.has(pvc.UID) && claimUsed(c.pods, key) {
		msg := fmt.Sprintf("Unable to expand %s because CSI driver %s only supports offline expansion and volume is currently in-use", key, c.cfg.Driver.Name)
		c.recorder.Event(pvc, v1.EventTypeWarning, reasonResizeFailed, msg)
		return errors.New(msg)
	}
	c.recorder.Event(pvc, v1.EventTypeNormal, reasonResizing, "External resizer is resizing volume "+pv.Name)
	if err := c.grow(ctx, key, pvc, pv, p.size, oldSize); err != nil {
		c.recorder.Event(pvc, v1.EventTypeWarning, reasonResizeFailed, err.Error())
		return err
	}
	return nil
}

// grow calls the driver and writes what comes of it: the failure on the claim, or the
// PV's new capacity and the claim handed to the node or finished.
func (c *Controller) grow(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, size, oldSize resource.Quantity) error {
	c.inUse.set(pvc.UID, false)
	newSize, nodeRequired, err := c.growVolume(ctx, pv, size)
	c.histories.set(key, c.histories.get(key).afterExpand(err))
	if err != nil {
		c.inUse.set(pvc.UID, isInUse(err))
		failed := fmt.Errorf("resize volume %q by resizer %q failed: %w", pv.Name, c.cfg.Driver.Name, err)
		if !isFinal(err) {
			return failed
		}
		// The claim's resourceVersion is not checked: this must reach the claim even if
		// it changed meanwhile, or the user could not recover.
		if _, perr := patchClaim(ctx, c.cfg.Client, pvc, controllerResizeFailed(pvc, err, isInfeasible(err), c.now()), false); perr != nil {
			return fmt.Errorf("%w; and marking the claim failed: %w", failed, perr)
		}
		return failed
	}

	klog.FromContext(ctx).V(4).Info("Volume expanded", "newSize", newSize.String(), "nodeExpansionRequired", nodeRequired)
	if _, err := patchVolume(ctx, c.cfg.Client, pv, volumeGrown(pv, newSize, oldSize, c.cfg.AnnotateFsResize && nodeRequired)); err != nil {
		return fmt.Errorf("update capacity of PV %s: %w", pv.Name, err)
	}
	if nodeRequired {
		if _, err := patchClaim(ctx, c.cfg.Client, pvc, nodeResizePending(pvc, c.now()), true); err != nil {
			return fmt.Errorf("mark claim %s for node expansion: %w", key, err)
		}
		c.recorder.Event(pvc, v1.EventTypeNormal, reasonFileSystemResizeRequired, "Require file system resize of volume on node")
		return nil
	}
	if _, err := patchClaim(ctx, c.cfg.Client, pvc, resizeFinished(pvc, newSize), true); err != nil {
		return fmt.Errorf("mark claim %s as resized: %w", key, err)
	}
	c.recorder.Event(pvc, v1.EventTypeNormal, reasonResizeSucceeded, "Resize volume succeeded")
	return nil
}

func (c *Controller) now() metav1.Time { return metav1.NewTime(c.cfg.Clock.Now()) }
