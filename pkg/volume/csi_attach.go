package volume

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A volume whose driver needs attaching (CSIDriver attachRequired, the
// default) is attached by the attach/detach controller and the driver's
// attacher; the node only waits for it. Before it stages such a volume
// the kubelet checks two things, in this order:
//
//  1. the Node's own status, when the controller manages the node's
//     attachments (controller-managed attach-detach, the default): the
//     volume must be in status.volumesInUse (the controller never
//     detaches it under a mount from then on) and in
//     status.volumesAttached (the controller's word that it is attached,
//     which it withdraws before it detaches);
//  2. the VolumeAttachment, for status.attached and the attachment
//     metadata handed to the driver as its publish context.
//
// The kubelet reads its Node with a GET each time; the agent reads it from
// a watch (Config.Node), so a waiting volume costs the apiserver nothing.

// attachmentName is the VolumeAttachment the attach/detach controller
// makes for a volume on a node.
func attachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// uniqueVolumeName is the name the Node's status gives a CSI volume
// (volumesInUse, volumesAttached).
func uniqueVolumeName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName(csiPluginName + "/" + driver + "^" + handle)
}

// errAttachPending is the error of an attachment not made or not done yet.
var errAttachPending = errors.New("not attached yet")

// waitAttached returns the publish context of the volume's attachment once
// the Node lists the volume attached (with a Node source) and the
// attachment says it is. It waits in the pass, looking again with a
// growing pause (0.5 s to 5 s), for up to attachWait, as the kubelet waits
// for an attachment before it mounts: no event while it waits, one
// failure when the wait ends, and then the pass's own back-off. An
// attachment that failed ends the wait at once. The caller holds no lock
// of the volume: a teardown of another pod of the volume, or its
// expansion, does not wait for the attachment. A driver whose CSIDriver
// comes to say attachRequired=false while the volume waits (recreated so)
// ends the wait with no publish context, as the kubelet, which asks the
// CSIDriver at each look, stops waiting for such a volume.
func (p *csiPlugin) waitAttached(ctx context.Context, name string, cv *csiVolume) (map[string]string, error) {
	deadline := time.Now().Add(p.attachWait)
	pause := 500 * time.Millisecond
	for {
		meta, err := p.attached(ctx, name, cv)
		if errors.Is(err, errAttachPending) {
			if pol, perr := p.policy(ctx, cv.driver); perr == nil && !pol.attachRequired {
				return nil, nil
			}
		}
		if !errors.Is(err, errAttachPending) || !time.Now().Add(pause).Before(deadline) {
			return meta, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
		pause = min(pause*3/2, 5*time.Second)
	}
}

// attached looks once at the Node's status, then at the attachment.
func (p *csiPlugin) attached(ctx context.Context, name string, cv *csiVolume) (map[string]string, error) {
	if p.node != nil {
		if err := verifyControllerAttached(p.node, cv); err != nil {
			return nil, err
		}
	}
	return p.attachment(ctx, name, cv)
}

// verifyControllerAttached is the kubelet's check of its Node's status
// before it mounts a volume the attach/detach controller attaches, with
// its messages; each failure is a pending attachment.
func verifyControllerAttached(node func() (*v1.Node, error), cv *csiVolume) error {
	pending := func(step string, err error) error {
		return &stepError{step: step, volume: cv.dirName, err: err, kind: errAttachPending}
	}
	n, err := node()
	if err != nil {
		return pending("VerifyControllerAttachedVolume failed fetching node from API server", err)
	}
	name := uniqueVolumeName(cv.driver, cv.handle)
	if !slices.Contains(n.Status.VolumesInUse, name) {
		// The Node's status is written every nodeStatusUpdateFrequency; the
		// volume was recorded in use before the wait began.
		return pending("Volume has not been added to the list of VolumesInUse in the node's volume status", nil)
	}
	if !slices.ContainsFunc(n.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == name }) {
		return pending("Volume not attached according to node status", nil)
	}
	return nil
}

// attachment reads the volume's attachment once.
func (p *csiPlugin) attachment(ctx context.Context, name string, cv *csiVolume) (map[string]string, error) {
	va, err := p.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	// The Node authorizer lets a node read only the attachments that name it: one not
	// made yet is forbidden, not missing. (With a Node source the attachment is read
	// only once the Node lists the volume attached, as the kubelet reads it.)
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("volume %s (driver %s) is %w: VolumeAttachment %s does not exist", cv.handle, cv.driver, errAttachPending, name)
	}
	if err != nil {
		return nil, fmt.Errorf("get VolumeAttachment %s: %w", name, err)
	}
	// The attach/detach controller deletes an attachment to detach it; until the
	// driver's attacher has let it go, status.attached may still say true. The
	// controller clears node.status.volumesAttached before it detaches, so with a
	// Node source this is seen only in a race.
	if va.DeletionTimestamp != nil {
		return nil, fmt.Errorf("volume %s (driver %s) is being detached: VolumeAttachment %s is being deleted", cv.handle, cv.driver, name)
	}
	if !va.Status.Attached {
		if e := va.Status.AttachError; e != nil {
			return nil, fmt.Errorf("volume attachment %s failed: %s", name, e.Message)
		}
		return nil, fmt.Errorf("volume %s (driver %s) is %w: VolumeAttachment %s is being attached", cv.handle, cv.driver, errAttachPending, name)
	}
	return va.Status.AttachmentMetadata, nil
}
