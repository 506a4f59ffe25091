package volume

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// atMount is the node's part of an expansion, done by the pass that
// publishes a volume, as the kubelet does it while it mounts: for a claim
// grown while no pod on the node used the volume (offline expansion), or
// one whose node expansion was left unfinished. It runs after
// NodePublishVolume, with the publish target as the volume path and the
// staging directory (for drivers with STAGE_UNSTAGE) as the staging path,
// when the claim's status.capacity is below the PV's capacity; the plan
// (planExpansion) decides, from the claim's resize status, whether the
// node grows it now (NodeResizePending or NodeResizeInProgress, or an
// older resizer that records no status), and grow carries it out as for a
// published volume: the claim marked in progress, NodeExpandVolume, the
// claim's capacity written and its resize status cleared, the
// FileSystemResizeSuccessful events. A failure is the publish's failure,
// in the kubelet's words, so the pod does not start; the caller retries
// it with the pass. A volume the pod mounts read-only is not grown: the
// pod and the claim get the kubelet's FileSystemResizeFailed event and the
// publish goes on.
func (e *expander) atMount(ctx context.Context, v publishedVolume, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) error {
	if e == nil || pvc == nil || pv == nil {
		return nil
	}
	statusSize := pvc.Status.Capacity[v1.ResourceStorage]
	pvSize := pv.Spec.Capacity[v1.ResourceStorage]
	if pvSize.Cmp(statusSize) <= 0 {
		return nil
	}
	if v.readOnly {
		msg := fmt.Sprintf("MountVolume.NodeExpandVolume failed for volume %q requested read-only file system", v.dirName)
		e.rec.Eventf(v.pod.object(), v1.EventTypeWarning, eventFileSystemResizeFailed, "%s", msg)
		e.rec.Eventf(pvc, v1.EventTypeWarning, eventFileSystemResizeFailed, "%s", msg)
		return nil
	}
	t := expandTarget{key: v.driver + "^" + v.handle, publishedVolume: v}
	e.mu.Lock()
	st := e.state(t.key)
	if st.running {
		// The volume is published for another pod and being grown online:
		// that expansion finishes the claim.
		e.mu.Unlock()
		return nil
	}
	// The size the volume has is the claim's, as the kubelet takes it at a
	// mount; what this node learnt of the driver's failures still counts.
	plan := planExpansion(pvc, pv, false, expandKnown{size: statusSize, failedFinal: st.known.failedFinal})
	if plan.action != expandRun {
		e.mu.Unlock()
		return nil
	}
	st.running = true
	e.mu.Unlock()

	verdict, err := e.grow(ctx, t, pvc, plan)
	e.mu.Lock()
	st.settle(plan, verdict)
	if err == nil {
		st.backoff, st.retryAt = 0, time.Time{}
	}
	e.mu.Unlock()
	if err != nil {
		return &stepError{step: "MountVolume.Setup failed while expanding volume", volume: v.dirName, err: err}
	}
	return nil
}
