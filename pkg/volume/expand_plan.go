package volume

import (
	"errors"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Expansion on the node decides in two pure steps, as the kubelet's
// volume manager does for a volume of a claim, mounted (online) or being
// mounted (offline): planExpansion says from the claim, its PV and what
// this node knows of the volume whether the driver is to be asked to grow
// it (NodeExpandVolume) and what is written to the claim around the call;
// judgeExpansion says, from the call's answer, what comes of it. The
// expander carries both out.

// annNodeExpansionNotRequired on a claim says that a ReadWriteMany volume
// already grown needs nothing from the other nodes that mount it.
const annNodeExpansionNotRequired = "volume.kubernetes.io/node-expansion-not-required"

// expandKnown is what this node knows of one volume between passes: the
// kubelet keeps the same in its actual state of the world.
type expandKnown struct {
	// size is the size the volume has on this node: the claim's
	// status.capacity when first seen, the new size after an expansion.
	size resource.Quantity
	// inUse: the driver answered FailedPrecondition (it cannot grow the
	// volume while it is in use), so this node does not try again.
	inUse bool
	// failedFinal: an earlier try ended with a final error.
	failedFinal bool
}

// expandAction is what a plan asks for.
type expandAction int

const (
	// expandNone: the volume has the PV's size, or is not this node's to
	// grow (read-only in the pod, or the driver refused it in use).
	expandNone expandAction = iota
	// expandWait: the PV grew but the claim does not yet let the node
	// expand (the controller's resize is in progress, or failed): look
	// again when the claim changes.
	expandWait
	// expandDone: the claim already has the new size and nothing is asked
	// of this node; the node takes the new size as its own.
	expandDone
	// expandRun: call NodeExpandVolume.
	expandRun
)

// expandPlan is the decision for one volume.
type expandPlan struct {
	action           expandAction
	oldSize, newSize resource.Quantity
	// markInProgress: set allocatedResourceStatuses[storage] to
	// NodeResizeInProgress before the call.
	markInProgress bool
	// finishClaim: after the call succeeds, write status.capacity = the new
	// size, drop the resize status and the resize conditions.
	finishClaim bool
	// recovery: the resizer records allocatedResources and the resize
	// status (RecoverVolumeExpansionFailure), so failures are written to
	// the claim; an older resizer records neither and learns nothing.
	recovery bool
	// infeasibleOnFailure: the user changed the claim's request since a
	// try that failed finally; a new failure marks the node's part
	// infeasible so the controller can take the new request.
	infeasibleOnFailure bool
	// doneIfUnsupported: a driver without EXPAND_VOLUME counts as done,
	// not failed (an older resizer, or the claim already has the size).
	doneIfUnsupported bool
}

// planExpansion decides for one volume of a claim, published or being
// published; readOnly is the pod's (or the PV's) read-only flag.
func planExpansion(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, readOnly bool, known expandKnown) expandPlan {
	// A volume the pod mounts read-only is not grown from this pod.
	if readOnly || known.inUse {
		return expandPlan{action: expandNone}
	}
	pvSize := pv.Spec.Capacity[v1.ResourceStorage]
	if known.size.IsZero() || pvSize.IsZero() || pvSize.Cmp(known.size) <= 0 {
		return expandPlan{action: expandNone}
	}
	plan := expandPlan{action: expandRun, oldSize: known.size, newSize: pvSize}
	statusSize := pvc.Status.Capacity[v1.ResourceStorage]
	resizeStatus := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
	if resizeStatus == "" && pvc.Status.AllocatedResources == nil {
		// An older resizer: grow to the PV's size, tell the claim the new
		// capacity if it does not have it yet.
		plan.finishClaim = statusSize.Cmp(plan.newSize) < 0
		plan.doneIfUnsupported = true
		return plan
	}
	plan.recovery = true
	// The resizer says what the node grows to.
	plan.newSize = pvc.Status.AllocatedResources[v1.ResourceStorage]
	if plan.newSize.IsZero() {
		return expandPlan{action: expandWait}
	}
	requested := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	plan.infeasibleOnFailure = requested.Cmp(plan.newSize) != 0 && known.failedFinal
	alreadyUpdated := statusSize.Cmp(plan.newSize) >= 0 && resizeStatus == ""
	switch {
	case alreadyUpdated && slices.Contains(pvc.Spec.AccessModes, v1.ReadWriteMany) &&
		pvc.Annotations[annNodeExpansionNotRequired] == "":
		// A ReadWriteMany volume is grown on every node that mounts it,
		// though another node already updated the claim.
		plan.doneIfUnsupported = true
		return plan
	case alreadyUpdated:
		return expandPlan{action: expandDone, oldSize: known.size, newSize: plan.newSize}
	case resizeStatus == v1.PersistentVolumeClaimNodeResizePending, resizeStatus == v1.PersistentVolumeClaimNodeResizeInProgress:
		plan.markInProgress, plan.finishClaim = true, true
		return plan
	default:
		// ControllerResizeInProgress, an infeasible resize, or no status
		// with allocatedResources set: not the node's turn.
		return expandPlan{action: expandWait}
	}
}

// errExpandUnsupported is the error of a driver without the EXPAND_VOLUME
// node capability: it is not called.
var errExpandUnsupported = errors.New("NodeExpand is not supported by the CSI driver")

// expandVerdict is what comes of a NodeExpandVolume call.
type expandVerdict struct {
	// done: the node takes the new size as the volume's.
	done bool
	// inUse: the driver cannot grow the volume while it is in use; the
	// node stops trying (and mounting goes on).
	inUse bool
	// final: the call surely ended without effect (not a timeout or an
	// unreachable driver).
	final bool
	// markClaim: write the failure to the claim (a NodeResizeError
	// condition), and infeasible also sets the resize status to
	// NodeResizeInfeasible.
	markClaim, infeasible bool
	// retry: try again after a back-off, with a VolumeResizeFailed event.
	retry bool
}

// judgeExpansion turns the answer of a NodeExpandVolume call (err nil on
// success, errExpandUnsupported when the driver was not called) into what
// the expander does next.
func judgeExpansion(plan expandPlan, err error) expandVerdict {
	if err == nil {
		return expandVerdict{done: true}
	}
	unsupported := errors.Is(err, errExpandUnsupported)
	if unsupported && plan.doneIfUnsupported {
		return expandVerdict{done: true}
	}
	code := status.Code(err)
	final := unsupported || finalError(err)
	inUse := code == codes.FailedPrecondition
	v := expandVerdict{final: final, inUse: inUse}
	if plan.recovery && final {
		v.markClaim = true
		v.infeasible = plan.infeasibleOnFailure ||
			code == codes.InvalidArgument || code == codes.OutOfRange || code == codes.NotFound
	}
	if inUse {
		// An older resizer's path takes the volume as done on this node.
		v.done = !plan.recovery
		return v
	}
	v.retry = true
	return v
}
