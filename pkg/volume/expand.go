package volume

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/volume/csi"
)

// Event reasons of expansion on the node, the kubelet's.
const (
	eventFileSystemResizeSuccess = "FileSystemResizeSuccessful"
	eventFileSystemResizeFailed  = "FileSystemResizeFailed"
	eventVolumeResizeFailed      = "VolumeResizeFailed"
)

// The kubelet's back-off between failed tries of one volume operation.
const (
	expandInitialBackoff = 500 * time.Millisecond
	expandMaxBackoff     = 2*time.Minute + 2*time.Second
)

// DefaultClaimCheckPeriod is how often the claims of published volumes are
// read to learn that one grew: the kubelet's syncFrequency, at which it
// reads every pod's claims again. A node may only get the claims of its
// pods, not watch them.
const DefaultClaimCheckPeriod = time.Minute

// Recorder records Kubernetes events (client-go's record.EventRecorder).
type Recorder interface {
	Eventf(object kruntime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// noRecorder drops events: the Recorder of a Manager configured without one.
type noRecorder struct{}

func (noRecorder) Eventf(kruntime.Object, string, string, string, ...interface{}) {}

// expander grows published CSI volumes of claims whose size grew (online
// expansion). It reads each claim once a period (one GET per claim, not
// per pod), its PV only when the claim changed, and for each volume whose
// plan says so calls NodeExpandVolume in a goroutine of its own, so a slow
// driver holds up no other volume and no pod. The pod's sync pass hands
// it the claim and PV it read anyway when it publishes, so a volume is
// looked at without a read of its own as soon as it is published. A
// volume whose claim grew while it was not published is grown by the
// pass that publishes it (atMount), with the same plan, the same steps
// and the same record of the volume.
type expander struct {
	plugin *csiPlugin
	client kube.Interface
	rec    Recorder
	clock  clock.Clock
	period time.Duration

	mu    sync.Mutex
	vols  map[string]*expandState // by volume (driver^handle)
	hints map[types.NamespacedName]claimHint
	wake  chan struct{} // capacity 1: a hint arrived
	wg    sync.WaitGroup
}

// claimHint is a claim and its PV as a pass just read them.
type claimHint struct {
	pvc *v1.PersistentVolumeClaim
	pv  *v1.PersistentVolume
}

// expandState is the expander's record of one volume.
type expandState struct {
	known   expandKnown
	claimRV string // the claim's resourceVersion the last plan was made from
	pv      *v1.PersistentVolume
	checked time.Time // when the claim was last read
	running bool
	// retryAt is when a failed expansion is tried again (zero: none due);
	// backoff the pause after the next failure.
	retryAt time.Time
	backoff time.Duration
}

func newExpander(plugin *csiPlugin, client kube.Interface, rec Recorder, clk clock.Clock, period time.Duration) *expander {
	if period <= 0 {
		period = DefaultClaimCheckPeriod
	}
	return &expander{plugin: plugin, client: client, rec: rec, clock: clk, period: period,
		vols: map[string]*expandState{}, hints: map[types.NamespacedName]claimHint{}, wake: make(chan struct{}, 1)}
}

// observe hands the expander a claim and its PV just read by a pass. It
// never blocks. Nil claims (inline volumes) are ignored.
func (e *expander) observe(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
	if e == nil || pvc == nil || pv == nil {
		return
	}
	e.mu.Lock()
	e.hints[types.NamespacedName{Namespace: pvc.Namespace, Name: pvc.Name}] = claimHint{pvc: pvc, pv: pv}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// run looks at the volumes at every hint, every period and when a retry
// is due, until ctx ends; it waits for the expansions it started.
func (e *expander) run(ctx context.Context) error {
	defer e.wg.Wait()
	for {
		next := e.pass(ctx)
		timer := e.clock.NewTimer(next)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-e.wake:
		case <-timer.C():
		}
		timer.Stop()
	}
}

// expandTarget is one published volume of a claim, as expanded: the first
// of its pods (by UID) gets the events.
type expandTarget struct {
	key string
	publishedVolume
}

// targets lists the published volumes of claims, one per volume.
func (e *expander) targets() []expandTarget {
	p := e.plugin
	p.mu.Lock()
	defer p.mu.Unlock()
	uids := make([]types.UID, 0, len(p.published))
	for uid := range p.published {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	seen := map[string]bool{}
	var out []expandTarget
	for _, uid := range uids {
		names := make([]string, 0, len(p.published[uid]))
		for n := range p.published[uid] {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			v := p.published[uid][n]
			key := v.driver + "^" + v.handle
			if v.claim.Name == "" || seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, expandTarget{key: key, publishedVolume: v})
		}
	}
	return out
}

// pass looks at every published volume of a claim whose look is due and
// starts the expansions its plan asks for. It returns how long until the
// next look is due.
func (e *expander) pass(ctx context.Context) time.Duration {
	now := e.clock.Now()
	targets := e.targets()
	e.mu.Lock()
	hints := e.hints
	e.hints = map[types.NamespacedName]claimHint{}
	live := map[string]bool{}
	for _, t := range targets {
		live[t.key] = true
	}
	for key, st := range e.vols {
		if !live[key] && !st.running {
			delete(e.vols, key)
		}
	}
	e.mu.Unlock()

	next := e.period
	claims := map[types.NamespacedName]*v1.PersistentVolumeClaim{}
	for _, t := range targets {
		e.mu.Lock()
		st := e.state(t.key)
		running, checked, retryAt := st.running, st.checked, st.retryAt
		e.mu.Unlock()
		if running {
			continue
		}
		hint, hinted := hints[t.claim]
		retryDue := !retryAt.IsZero() && !now.Before(retryAt)
		pollDue := checked.IsZero() || now.Sub(checked) >= e.period
		if !hinted && !retryDue && !pollDue {
			next = min(next, e.period-now.Sub(checked))
			if !retryAt.IsZero() {
				next = min(next, retryAt.Sub(now))
			}
			continue
		}
		pvc, pv := hint.pvc, hint.pv
		if !hinted {
			var err error
			if pvc, err = e.claim(ctx, t.claim, claims); err != nil {
				klog.FromContext(ctx).V(2).Info("Cannot read the claim of a published volume", "claim", t.claim, "err", err)
				e.mu.Lock()
				st.checked = now
				e.mu.Unlock()
				continue
			}
		}
		e.mu.Lock()
		st.checked = now
		unchanged := pvc.ResourceVersion == st.claimRV && st.pv != nil && !retryDue
		if pv == nil && pvc.ResourceVersion == st.claimRV && !retryDue {
			pv = st.pv
		}
		e.mu.Unlock()
		if unchanged && !hinted {
			continue
		}
		if pv == nil {
			// The PV is read only when its claim changed (a resizer raises
			// the PV's capacity, then marks the claim).
			got, err := e.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				klog.FromContext(ctx).V(2).Info("Cannot read the PV of a published volume", "pv", pvc.Spec.VolumeName, "err", err)
				continue
			}
			pv = got
		}
		e.mu.Lock()
		st.claimRV, st.pv = pvc.ResourceVersion, pv
		if st.known.size.IsZero() {
			// First sight (or after a restart): the claim's capacity is the
			// size the volume has here.
			st.known.size = pvc.Status.Capacity[v1.ResourceStorage]
		}
		plan := planExpansion(pvc, pv, t.readOnly, st.known)
		switch plan.action {
		case expandDone:
			st.known.size = plan.newSize
		case expandRun:
			st.running = true
			st.retryAt = time.Time{}
		}
		e.mu.Unlock()
		if plan.action == expandRun {
			e.wg.Go(func() { e.expand(ctx, t, st, pvc, plan) })
		}
	}
	return max(next, time.Millisecond)
}

// state is the record of the volume key, made on first sight. The caller
// holds e.mu.
func (e *expander) state(key string) *expandState {
	st, ok := e.vols[key]
	if !ok {
		st = &expandState{}
		e.vols[key] = st
	}
	return st
}

// claim reads a claim once per pass.
func (e *expander) claim(ctx context.Context, name types.NamespacedName, cache map[types.NamespacedName]*v1.PersistentVolumeClaim) (*v1.PersistentVolumeClaim, error) {
	if pvc, ok := cache[name]; ok {
		return pvc, nil
	}
	pvc, err := e.client.CoreV1().PersistentVolumeClaims(name.Namespace).Get(ctx, name.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	cache[name] = pvc
	return pvc, nil
}

// expand carries out one plan for a published volume, in its own
// goroutine: a failure gets the kubelet's VolumeResizeFailed event and a
// retry after a back-off.
func (e *expander) expand(ctx context.Context, t expandTarget, st *expandState, pvc *v1.PersistentVolumeClaim, plan expandPlan) {
	verdict, err := e.grow(ctx, t, pvc, plan)
	e.mu.Lock()
	defer e.mu.Unlock()
	st.settle(plan, verdict)
	if err == nil {
		st.backoff = 0
		return
	}
	e.rec.Eventf(t.pod.object(), v1.EventTypeWarning, eventVolumeResizeFailed, "NodeExpandVolume.NodeExpandVolume failed for volume %q : %v", t.dirName, err)
	klog.FromContext(ctx).Error(err, "NodeExpandVolume failed, will retry", "pod", klog.KRef(t.pod.namespace, t.pod.name),
		"volume", t.dirName, "claim", t.claim)
	st.backoff = min(max(st.backoff*2, expandInitialBackoff), expandMaxBackoff)
	st.retryAt = e.clock.Now().Add(st.backoff)
	// Wake the loop so that it sets its timer for the retry.
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// grow carries out one plan, online or at a publish alike: the claim
// marked in progress, the driver called, the verdict written to the
// claim, the success events on the pod and the claim. It returns the
// verdict and the error that makes the try a failure to retry; nil when
// the volume is done with, grown or not (a driver that cannot grow it in
// use, or that lacks the capability where that counts as done).
func (e *expander) grow(ctx context.Context, t expandTarget, pvc *v1.PersistentVolumeClaim, plan expandPlan) (expandVerdict, error) {
	log := klog.FromContext(ctx).WithValues("pod", klog.KRef(t.pod.namespace, t.pod.name), "volume", t.dirName, "claim", t.claim)
	var verdict expandVerdict
	if plan.markInProgress {
		updated, err := e.patchClaimStatus(ctx, pvc, true, claimInProgress(pvc))
		if err != nil {
			return verdict, fmt.Errorf("MountVolume.NodeExpandVolume failed to mark node expansion in progress: %w", err)
		}
		pvc = updated
	}
	callErr := e.callDriver(ctx, t, plan.newSize)
	verdict = judgeExpansion(plan, callErr)
	if verdict.markClaim {
		// The claim's resourceVersion is not checked here: the failure
		// is written whatever changed meanwhile, as the kubelet does.
		if updated, err := e.patchClaimStatus(ctx, pvc, false, claimFailed(pvc, callErr, verdict.infeasible)); err != nil {
			log.Error(err, "MountVolume.NodeExpandVolume failed to mark node expansion as failed")
		} else {
			pvc = updated
		}
	}
	if callErr != nil && !verdict.done {
		if verdict.inUse {
			log.Error(callErr, "NodeExpandVolume refused while the volume is in use; not retried on this node")
			return verdict, nil
		}
		return verdict, callErr
	}
	if callErr != nil {
		log.V(4).Info("NodeExpandVolume not done by the driver; the volume is taken as grown", "err", callErr)
		return verdict, nil
	}
	msg := fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", t.dirName, e.plugin.nodeName)
	e.rec.Eventf(t.pod.object(), v1.EventTypeNormal, eventFileSystemResizeSuccess, "%s", msg)
	e.rec.Eventf(pvc, v1.EventTypeNormal, eventFileSystemResizeSuccess, "%s", msg)
	log.Info("Volume expanded on the node", "oldSize", plan.oldSize.String(), "newSize", plan.newSize.String())
	if plan.finishClaim {
		if _, err := e.patchClaimStatus(ctx, pvc, true, claimFinished(pvc, plan.newSize)); err != nil {
			return verdict, fmt.Errorf("mountVolume.NodeExpandVolume update pvc status failed: %w", err)
		}
	}
	return verdict, nil
}

// settle records what came of a try in the volume's record: it is no
// longer running, and what the node now knows of it. The caller holds
// the expander's lock.
func (st *expandState) settle(plan expandPlan, verdict expandVerdict) {
	st.running = false
	if verdict.done {
		st.known.size = plan.newSize
		st.known.failedFinal = false
	}
	if verdict.inUse {
		st.known.inUse = true
	}
	if verdict.final && !verdict.done {
		st.known.failedFinal = true
	}
}

// object is the pod as events name it.
func (r podRef) object() *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: r.namespace, Name: r.name, UID: r.uid}
}

// callDriver calls NodeExpandVolume for the volume as it is published, or
// answers errExpandUnsupported for a driver without the capability.
func (e *expander) callDriver(ctx context.Context, t expandTarget, size resource.Quantity) error {
	p := e.plugin
	driver, err := p.drivers.Driver(t.driver)
	if err != nil {
		return err
	}
	if !driver.NodeExpand {
		return fmt.Errorf("%w %s", errExpandUnsupported, t.driver)
	}
	secrets, err := p.secrets(ctx, t.expandSecret)
	if err != nil {
		return fmt.Errorf("expander.NodeExpand failed to get NodeExpandSecretRef %s/%s: %w", t.expandSecret.Namespace, t.expandSecret.Name, err)
	}
	// One call at a time per volume: not beside its stage or publish.
	unlock := p.lockVolume(t.driver, t.handle)
	defer unlock()
	// Unlike a publish, a cancelled expansion leaves nothing to undo: it is
	// asked again, so the agent's shutdown does not wait for it.
	cctx, cancel := context.WithTimeout(ctx, csi.CallTimeout)
	defer cancel()
	_, err = driver.Node().NodeExpandVolume(cctx, &csipb.NodeExpandVolumeRequest{
		VolumeId: t.handle, VolumePath: t.target, StagingTargetPath: t.staging,
		CapacityRange:    &csipb.CapacityRange{RequiredBytes: size.Value()},
		VolumeCapability: t.capability, Secrets: secrets,
	})
	if err != nil {
		return fmt.Errorf("Expander.NodeExpand failed to expand the volume : %w", err)
	}
	return nil
}

// The claim's status as the node writes it; each returns the status to
// patch in, leaving pvc untouched.

func claimInProgress(pvc *v1.PersistentVolumeClaim) v1.PersistentVolumeClaimStatus {
	s := *pvc.Status.DeepCopy()
	if s.AllocatedResourceStatuses == nil {
		s.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	s.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInProgress
	return s
}

func claimFinished(pvc *v1.PersistentVolumeClaim, size resource.Quantity) v1.PersistentVolumeClaimStatus {
	s := *pvc.Status.DeepCopy()
	if s.Capacity == nil {
		s.Capacity = v1.ResourceList{}
	}
	s.Capacity[v1.ResourceStorage] = size
	delete(s.AllocatedResourceStatuses, v1.ResourceStorage)
	if len(s.AllocatedResourceStatuses) == 0 {
		s.AllocatedResourceStatuses = nil
	}
	s.Conditions = slices.DeleteFunc(s.Conditions, func(c v1.PersistentVolumeClaimCondition) bool { return resizeCondition(c.Type) })
	return s
}

func claimFailed(pvc *v1.PersistentVolumeClaim, err error, infeasible bool) v1.PersistentVolumeClaimStatus {
	s := *pvc.Status.DeepCopy()
	if infeasible {
		if s.AllocatedResourceStatuses == nil {
			s.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
		}
		s.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInfeasible
	}
	cond := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
		LastTransitionTime: metav1.Now(), Message: fmt.Sprintf("failed to expand pvc with %v", err)}
	i := slices.IndexFunc(s.Conditions, func(c v1.PersistentVolumeClaimCondition) bool { return c.Type == cond.Type })
	switch {
	case i < 0:
		s.Conditions = append(s.Conditions, cond)
	case s.Conditions[i].Status != cond.Status:
		s.Conditions[i] = cond
	}
	return s
}

// resizeCondition says whether a claim condition belongs to resizing.
func resizeCondition(t v1.PersistentVolumeClaimConditionType) bool {
	switch t {
	case v1.PersistentVolumeClaimFileSystemResizePending, v1.PersistentVolumeClaimResizing,
		v1.PersistentVolumeClaimControllerResizeError, v1.PersistentVolumeClaimNodeResizeError:
		return true
	}
	return false
}

// patchClaimStatus writes the fields of the claim's status the node owns
// (capacity, conditions, allocatedResourceStatuses) through the status
// subresource, with a JSON merge patch: a map key set to null goes, the
// conditions are replaced whole. With checkVersion the patch carries the
// claim's resourceVersion, so that it fails if the claim changed since it
// was read.
func (e *expander) patchClaimStatus(ctx context.Context, pvc *v1.PersistentVolumeClaim, checkVersion bool, s v1.PersistentVolumeClaimStatus) (*v1.PersistentVolumeClaim, error) {
	statuses := map[v1.ResourceName]any{}
	for k := range pvc.Status.AllocatedResourceStatuses {
		statuses[k] = nil
	}
	for k, v := range s.AllocatedResourceStatuses {
		statuses[k] = v
	}
	conditions := s.Conditions
	if conditions == nil {
		conditions = []v1.PersistentVolumeClaimCondition{}
	}
	st := map[string]any{"conditions": conditions, "allocatedResourceStatuses": statuses}
	if s.Capacity != nil {
		st["capacity"] = s.Capacity
	}
	patch := map[string]any{"status": st}
	if checkVersion {
		patch["metadata"] = map[string]any{"resourceVersion": pvc.ResourceVersion}
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	updated, err := e.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, b, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("patchPVCStatus failed to patch PVC %q: %w", pvc.Name, err)
	}
	return updated, nil
}
