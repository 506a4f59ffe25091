package resizer

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// annResizer names the plugin that resizes a claim of a migrated in-tree volume; a change
// of it is a reason to look at the claim again.
const annResizer = "volume.kubernetes.io/storage-resizer"

// history is what earlier passes over one claim learned and the claim's API object does
// not say: external-resizer keeps the same in memory, so a restart forgets it too.
type history struct {
	// finalError: the last ControllerExpandVolume ended with a final error (the call surely
	// had no effect), so a lowered request may be tried in place of the size that failed.
	finalError bool
	// infeasibleSince is when the claim was first seen marked ControllerResizeInfeasible in
	// this round; zero when it is not. Until slowRetry has passed, the same size is not
	// tried again.
	infeasibleSince time.Time
}

// afterExpand is h once ControllerExpandVolume answered err (nil: the volume grew).
func (h history) afterExpand(err error) history {
	switch {
	case err == nil || !isFinal(err):
		// Grown, or the outcome is unknown (the call may still be running in the driver):
		// nothing final is known.
		return history{}
	case isInfeasible(err):
		return history{finalError: true, infeasibleSince: h.infeasibleSince}
	default:
		return history{finalError: true}
	}
}

// action is what a plan asks for.
type action int

const (
	// actNone: nothing to do for this claim now.
	actNone action = iota
	// actWait: the size was found infeasible a short while ago; look again after delay.
	actWait
	// actExpand: grow the volume to size.
	actExpand
)

// plan is the decision for one claim.
type plan struct {
	action action
	// size is the size to grow to (actExpand), recorded as status.allocatedResources; with
	// actWait, the size waited on.
	size resource.Quantity
	// newStatus: set the resize status to ControllerResizeInProgress and drop the other
	// resize conditions. False when size is the allocated size already: the try repeats an
	// earlier one and what the claim says of it (a NodeResizeError, say) stays.
	newStatus bool
	// delay is how long to wait (actWait).
	delay time.Duration
	// history is what to remember of the claim from now on.
	history history
}

// planResize decides for a claim, its PV and what earlier passes learned (h), as
// external-resizer does with RecoverVolumeExpansionFailure: the size to grow to is the
// request unless an earlier expansion to another size may still be under way or done in
// part, and a size the driver found infeasible is tried again only after slowRetry.
// driver is the driver's name; controllerExpansion says whether it grows volumes in its
// controller (otherwise only on the node).
func planResize(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, driver string, controllerExpansion bool, h history, now time.Time, slowRetry time.Duration) plan {
	if !wantsResize(pvc) || !ownVolume(pvc, pv, driver) {
		return plan{action: actNone, history: h}
	}
	requested := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	pvSize := pv.Spec.Capacity[v1.ResourceStorage]
	status := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
	allocated, hasAllocated := pvc.Status.AllocatedResources[v1.ResourceStorage]
	orAllocated := func() resource.Quantity {
		if hasAllocated {
			return allocated
		}
		return requested
	}

	// Whether the last infeasible size is still being waited out is what the claim said
	// before this pass; an infeasible claim seen for the first time starts the wait.
	waiting := !h.infeasibleSince.IsZero() && now.Sub(h.infeasibleSince) < slowRetry
	if status == v1.PersistentVolumeClaimControllerResizeInfeasible && !waiting {
		h.infeasibleSince = now
	}

	size := requested
	if pvSize.Cmp(requested) < 0 {
		// The volume is smaller than the request: an expansion is due, but one to another
		// size that may be under way or done in part goes first.
		switch status {
		case v1.PersistentVolumeClaimNodeResizeInfeasible:
			size = orAllocated()
		case v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress:
			size = orAllocated()
			if pvSize.Cmp(size) >= 0 {
				// The node is still to finish the last expansion.
				return plan{action: actNone, history: h}
			}
		case v1.PersistentVolumeClaimControllerResizeInProgress:
			// A final error means the last call did nothing, so the (maybe lowered)
			// request may be tried; otherwise that call may still be running.
			if !h.finalError {
				size = orAllocated()
			}
		}
	} else {
		// The volume has the request's size already.
		switch status {
		case v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress:
			// The node's turn.
			return plan{action: actNone, history: h}
		case v1.PersistentVolumeClaimNodeResizeInfeasible:
			// The node failed; before it tries again the claim is marked for the node once
			// more, at the size the controller grew the volume to. A node-only driver's
			// volume grew nowhere yet, so the (lowered) request is what the node gets.
			if controllerExpansion && hasAllocated {
				size = allocated
			}
		case v1.PersistentVolumeClaimControllerResizeInProgress, v1.PersistentVolumeClaimControllerResizeInfeasible:
			// Grown but not recorded, or the user lowered the request after the growth.
			size = orAllocated()
		default:
			if status == "" && hasAllocated {
				size = allocated
			} else if hasCondition(pvc, v1.PersistentVolumeClaimFileSystemResizePending) {
				// Grown by a resizer that records no status; the node finishes it.
				return plan{action: actNone, history: h}
			}
		}
	}

	p := plan{action: actExpand, size: size, newStatus: true, history: h}
	if hasAllocated && allocated.Cmp(size) == 0 {
		if waiting {
			return plan{action: actWait, size: size, delay: slowRetry - now.Sub(h.infeasibleSince), history: h}
		}
		p.newStatus = false
	}
	return p
}

// wantsResize says whether a claim asks for more than it has: bound, and requesting more
// storage than its status.capacity.
func wantsResize(pvc *v1.PersistentVolumeClaim) bool {
	if pvc.Status.Phase != v1.ClaimBound || pvc.Spec.VolumeName == "" {
		return false
	}
	requested := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	capacity := pvc.Status.Capacity[v1.ResourceStorage]
	return requested.Cmp(capacity) > 0
}

// ownVolume says whether pv is a CSI volume of driver bound to pvc.
func ownVolume(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, driver string) bool {
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driver {
		return false
	}
	ref := pv.Spec.ClaimRef
	return ref != nil && ref.Namespace == pvc.Namespace && ref.UID == pvc.UID
}

// nodeResizeDone says whether the node finished growing pv's file system: the claim's
// capacity has caught up with the PV's. The pre-resize capacity annotation has then served.
func nodeResizeDone(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) bool {
	claimSize := pvc.Status.Capacity[v1.ResourceStorage]
	pvSize := pv.Spec.Capacity[v1.ResourceStorage]
	return claimSize.Cmp(pvSize) >= 0
}

// claimChanged says whether an update of a claim from old to cur is worth a pass. Other
// changes (labels, the conditions this controller writes) are not, or a claim whose
// expansion fails would be tried again at once on each of them, not after a back-off.
func claimChanged(old, cur *v1.PersistentVolumeClaim) bool {
	oldReq := old.Spec.Resources.Requests[v1.ResourceStorage]
	curReq := cur.Spec.Resources.Requests[v1.ResourceStorage]
	oldCap := old.Status.Capacity[v1.ResourceStorage]
	curCap := cur.Status.Capacity[v1.ResourceStorage]
	switch {
	case oldReq.Cmp(curReq) != 0: // grown, or lowered to recover from a failure
	case old.Annotations[annResizer] != cur.Annotations[annResizer]:
	case old.ResourceVersion == cur.ResourceVersion: // the informer's periodic resync
	case curCap.Cmp(oldCap) > 0: // the node finished: drop the pre-resize annotation
	case old.Status.AllocatedResourceStatuses[v1.ResourceStorage] != cur.Status.AllocatedResourceStatuses[v1.ResourceStorage]:
		// The node failed or finished its part.
	default:
		return false
	}
	return true
}
