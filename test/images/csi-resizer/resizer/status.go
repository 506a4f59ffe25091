package resizer

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The claim as each step of a resize leaves it. Each function returns a changed copy of
// pvc; the caller patches the difference.

// annNodeExpansionNotRequired on a claim tells the nodes that the volume is grown in full
// (a ReadWriteMany volume's other nodes would otherwise grow it too).
const annNodeExpansionNotRequired = "volume.kubernetes.io/node-expansion-not-required"

// annPreResizeCapacity on a PV keeps the claim's capacity from before an expansion that
// the node is still to finish: should the claim go and another bind the PV, the PV
// controller gives the new claim this capacity, so its node still grows the file system.
const annPreResizeCapacity = "volume.alpha.kubernetes.io/pre-resize-capacity"

// fsResizePendingMessage is the FileSystemResizePending condition's message.
const fsResizePendingMessage = "Waiting for user to (re-)start a pod to finish file system resize of volume on node."

// resizeConditions are the claim conditions a resize writes; others are never touched.
var resizeConditions = map[v1.PersistentVolumeClaimConditionType]bool{
	v1.PersistentVolumeClaimResizing:                true,
	v1.PersistentVolumeClaimFileSystemResizePending: true,
	v1.PersistentVolumeClaimControllerResizeError:   true,
	v1.PersistentVolumeClaimNodeResizeError:         true,
}

// resizeStarted is pvc as the controller's expansion to size begins: the Resizing
// condition and size as allocatedResources; with newStatus, the resize status
// ControllerResizeInProgress and no older resize condition.
func resizeStarted(pvc *v1.PersistentVolumeClaim, size resource.Quantity, newStatus bool, now metav1.Time) *v1.PersistentVolumeClaim {
	c := pvc.DeepCopy()
	cond := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimResizing, Status: v1.ConditionTrue, LastTransitionTime: now}
	c.Status.Conditions = setResizeConditions(c.Status.Conditions, !newStatus, cond)
	delete(c.Annotations, annNodeExpansionNotRequired)
	if newStatus {
		setResizeStatus(c, v1.PersistentVolumeClaimControllerResizeInProgress)
	}
	if c.Status.AllocatedResources == nil {
		c.Status.AllocatedResources = v1.ResourceList{}
	}
	c.Status.AllocatedResources[v1.ResourceStorage] = size
	return c
}

// nodeResizePending is pvc once the controller grew the volume and the node is to grow
// the file system: the FileSystemResizePending condition and the resize status
// NodeResizePending.
func nodeResizePending(pvc *v1.PersistentVolumeClaim, now metav1.Time) *v1.PersistentVolumeClaim {
	c := pvc.DeepCopy()
	cond := v1.PersistentVolumeClaimCondition{
		Type:               v1.PersistentVolumeClaimFileSystemResizePending,
		Status:             v1.ConditionTrue,
		LastTransitionTime: now,
		Message:            fsResizePendingMessage,
	}
	c.Status.Conditions = setResizeConditions(c.Status.Conditions, true, cond)
	delete(c.Annotations, annNodeExpansionNotRequired)
	setResizeStatus(c, v1.PersistentVolumeClaimNodeResizePending)
	return c
}

// resizeFinished is pvc once the volume grew to size and the node has nothing to do: the
// new capacity, no resize condition or status, and the annotation that tells the nodes so.
func resizeFinished(pvc *v1.PersistentVolumeClaim, size resource.Quantity) *v1.PersistentVolumeClaim {
	c := pvc.DeepCopy()
	if c.Status.Capacity == nil {
		c.Status.Capacity = v1.ResourceList{}
	}
	c.Status.Capacity[v1.ResourceStorage] = size
	c.Status.Conditions = setResizeConditions(c.Status.Conditions, false)
	delete(c.Status.AllocatedResourceStatuses, v1.ResourceStorage)
	if len(c.Status.AllocatedResourceStatuses) == 0 {
		c.Status.AllocatedResourceStatuses = nil
	}
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[annNodeExpansionNotRequired] = "true"
	return c
}

// controllerResizeFailed is pvc after ControllerExpandVolume failed with a final error:
// the ControllerResizeError condition, and when the size cannot be had (infeasible) the
// resize status ControllerResizeInfeasible, which lets the user lower the request.
func controllerResizeFailed(pvc *v1.PersistentVolumeClaim, err error, infeasible bool, now metav1.Time) *v1.PersistentVolumeClaim {
	c := pvc.DeepCopy()
	cond := v1.PersistentVolumeClaimCondition{
		Type:               v1.PersistentVolumeClaimControllerResizeError,
		Status:             v1.ConditionTrue,
		LastTransitionTime: now,
		Message:            fmt.Sprintf("failed to expand pvc with %v", err),
	}
	c.Status.Conditions = setResizeConditions(c.Status.Conditions, true, cond)
	if infeasible {
		setResizeStatus(c, v1.PersistentVolumeClaimControllerResizeInfeasible)
	}
	return c
}

// setResizeStatus sets the claim's resize status of storage.
func setResizeStatus(pvc *v1.PersistentVolumeClaim, s v1.ClaimResourceStatus) {
	if pvc.Status.AllocatedResourceStatuses == nil {
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = s
}

// setResizeConditions returns conds with set in place of the resize conditions of the
// same types (added at the end where there are none); the other resize conditions stay
// only with keep. Conditions of other kinds stay as they are.
func setResizeConditions(conds []v1.PersistentVolumeClaimCondition, keep bool, set ...v1.PersistentVolumeClaimCondition) []v1.PersistentVolumeClaimCondition {
	placed := make([]bool, len(set))
	var out []v1.PersistentVolumeClaimCondition
	for _, c := range conds {
		if !resizeConditions[c.Type] {
			out = append(out, c)
			continue
		}
		i := conditionIndex(set, c.Type)
		switch {
		case i >= 0 && !placed[i]:
			out = append(out, set[i])
			placed[i] = true
		case i < 0 && keep:
			out = append(out, c)
		}
	}
	for i, c := range set {
		if !placed[i] {
			out = append(out, c)
		}
	}
	return out
}

func conditionIndex(conds []v1.PersistentVolumeClaimCondition, t v1.PersistentVolumeClaimConditionType) int {
	for i, c := range conds {
		if c.Type == t {
			return i
		}
	}
	return -1
}

// hasCondition says whether pvc has condition t with status True.
func hasCondition(pvc *v1.PersistentVolumeClaim, t v1.PersistentVolumeClaimConditionType) bool {
	for _, c := range pvc.Status.Conditions {
		if c.Type == t && c.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

// volumeGrown is pv with the capacity size. With annotate, the claim's capacity from
// before (old) goes into the pre-resize annotation, unless an earlier expansion the node
// has not finished put one there.
func volumeGrown(pv *v1.PersistentVolume, size, old resource.Quantity, annotate bool) *v1.PersistentVolume {
	c := pv.DeepCopy()
	if c.Spec.Capacity == nil {
		c.Spec.Capacity = v1.ResourceList{}
	}
	c.Spec.Capacity[v1.ResourceStorage] = size
	if _, ok := c.Annotations[annPreResizeCapacity]; annotate && !ok {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[annPreResizeCapacity] = old.String()
	}
	return c
}
