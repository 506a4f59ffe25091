package sync

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	gosync "sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/admission"
	"github.com/nodeagent/nodeagent/pkg/allocation"
	"github.com/nodeagent/nodeagent/pkg/qos"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// In-place resize, as the kubelet does it. A pod's spec asks for new
// resources; the Dispatcher judges whether the node has room for them
// beside the other pods' allocations (judgeResizes): if so they become
// the pod's allocation (ResizeStarted, PodResizeInProgress), if not the
// resize waits (PodResizePending, Deferred) and is judged again as room
// frees up. The worker only ever sees the allocated pod: its passes bring
// the running containers to it (planResizes, applyResizes) and clear
// PodResizeInProgress once every running container has what was
// allocated (ResizeCompleted).

// Event reasons of resizes, as the kubelet names them.
const (
	eventResizeStarted   = "ResizeStarted"
	eventResizeCompleted = "ResizeCompleted"
	eventResizeDeferred  = "ResizeDeferred"
	eventResizeError     = "ResizeError"
)

// resizeConditions are the pods' PodResizePending and PodResizeInProgress
// conditions: the Dispatcher and the pods' workers set them, the status
// reports them.
type resizeConditions struct {
	mu         gosync.Mutex
	pending    map[types.UID]v1.PodCondition
	inProgress map[types.UID]v1.PodCondition
}

func newResizeConditions() *resizeConditions {
	return &resizeConditions{pending: map[types.UID]v1.PodCondition{}, inProgress: map[types.UID]v1.PodCondition{}}
}

// list returns the pod's resize conditions, pending first.
func (r *resizeConditions) list(uid types.UID) []v1.PodCondition {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []v1.PodCondition
	if c, ok := r.pending[uid]; ok {
		out = append(out, c)
	}
	if c, ok := r.inProgress[uid]; ok {
		out = append(out, c)
	}
	return out
}

// setPending marks the pod's resize as waiting, Deferred unless the
// reason is Infeasible. It says whether the reason or the generation
// changed (a new event is due).
func (r *resizeConditions) setPending(uid types.UID, reason, message string, generation int64, now time.Time) bool {
	if reason != v1.PodReasonInfeasible {
		reason = v1.PodReasonDeferred
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old, had := r.pending[uid]
	c := v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: reason, Message: message,
		ObservedGeneration: generation, LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
	if had && old.Reason == reason {
		c.LastTransitionTime = old.LastTransitionTime
	}
	r.pending[uid] = c
	return !had || old.Reason != reason || old.ObservedGeneration != generation
}

// clearPending drops the pod's pending condition; it says whether there
// was one.
func (r *resizeConditions) clearPending(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, had := r.pending[uid]
	delete(r.pending, uid)
	return had
}

// pendingSince is when the pod's resize began to wait, if it does.
func (r *resizeConditions) pendingSince(uid types.UID) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.pending[uid]
	return c.LastTransitionTime.Time, ok
}

// startResize marks a newly allocated resize of the pod as in progress,
// for that generation, clearing any error of an earlier one.
func (r *resizeConditions) startResize(uid types.UID, generation int64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, uid)
	r.inProgress[uid] = v1.PodCondition{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue,
		ObservedGeneration: generation, LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
}

// setInProgress keeps the pod's resize in progress: an existing condition
// keeps its generation, and its reason and message unless new ones are
// given (an error). It says whether the condition changed.
func (r *resizeConditions) setInProgress(uid types.UID, reason, message string, generation int64, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, had := r.inProgress[uid]
	c := v1.PodCondition{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue, Reason: reason, Message: message,
		ObservedGeneration: generation, LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
	if had {
		c.ObservedGeneration, c.LastTransitionTime = old.ObservedGeneration, old.LastTransitionTime
		if reason == "" && message == "" {
			c.Reason, c.Message = old.Reason, old.Message
		}
	}
	r.inProgress[uid] = c
	return !had || old.Reason != c.Reason || old.Message != c.Message
}

// clearInProgress drops the pod's in-progress condition; it returns the
// generation it was for and whether there was one.
func (r *resizeConditions) clearInProgress(uid types.UID) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, had := r.inProgress[uid]
	delete(r.inProgress, uid)
	return c.ObservedGeneration, had
}

func (r *resizeConditions) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, uid)
	delete(r.inProgress, uid)
}

// resizeMessage is the text of a resize event in the kubelet's form: a
// prefix, then the pod's container resources and the generation as JSON.
func resizeMessage(prefix string, pod *v1.Pod, generation int64, errMsg string) string {
	type container struct {
		Name      string                  `json:"name"`
		Resources v1.ResourceRequirements `json:"resources,omitempty"`
	}
	summary := struct {
		InitContainers []container `json:"initContainers,omitempty"`
		Containers     []container `json:"containers,omitempty"`
		Generation     int64       `json:"generation"`
		Error          string      `json:"error,omitempty"`
	}{Generation: generation, Error: errMsg}
	for _, c := range pod.Spec.InitContainers {
		summary.InitContainers = append(summary.InitContainers, container{c.Name, c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		summary.Containers = append(summary.Containers, container{c.Name, c.Resources})
	}
	data, err := json.Marshal(summary)
	if err != nil {
		return prefix
	}
	return prefix + ": " + string(data)
}

// queueResize notes a pod whose spec may ask for a resize, and judges
// the waiting resizes at once, so that the worker, woken next, already
// sees the new allocation.
func (d *Dispatcher) queueResize(pod *v1.Pod) {
	alloc, ok := d.deps.alloc.Allocated(pod.UID)
	if !ok || pod.DeletionTimestamp != nil || isTerminal(pod.Status.Phase) {
		return
	}
	if equality.Semantic.DeepEqual(alloc, allocation.FromSpec(pod)) {
		// Nothing asked, or a resize taken back before it was allocated.
		if d.deps.resizes.clearPending(pod.UID) {
			d.mu.Lock()
			delete(d.resizing, pod.UID)
			d.mu.Unlock()
		}
		return
	}
	d.mu.Lock()
	d.resizing[pod.UID] = pod
	ctx := d.ctx
	d.mu.Unlock()
	select {
	case d.resizeWake <- struct{}{}:
	default:
	}
	if ctx != nil {
		d.judgeResizes(ctx)
	}
}

// judgeResizes judges every resize waiting for an allocation, in the
// kubelet's order: those that ask for no more first, then by priority,
// Guaranteed before Burstable, the longest waiting first. Each that fits
// beside the others' allocations becomes its pod's allocation.
func (d *Dispatcher) judgeResizes(ctx context.Context) {
	d.judging.Lock()
	defer d.judging.Unlock()
	d.mu.Lock()
	var queue []*v1.Pod
	for uid, pod := range d.resizing {
		w, ok := d.workers[uid]
		if _, removed := w.latest(); !ok || removed || w.ended.Load() {
			delete(d.resizing, uid)
			continue
		}
		queue = append(queue, pod)
	}
	d.mu.Unlock()
	if len(queue) == 0 {
		return
	}
	slices.SortStableFunc(queue, d.resizeOrder)
	for _, pod := range queue {
		d.judgeResize(ctx, pod)
	}
}

// resizeOrder orders waiting resizes (see judgeResizes).
func (d *Dispatcher) resizeOrder(a, b *v1.Pod) int {
	if ga, gb := d.growsRequests(a), d.growsRequests(b); ga != gb {
		if !ga {
			return -1
		}
		return 1
	}
	pa, pb := int32(0), int32(0)
	if a.Spec.Priority != nil {
		pa = *a.Spec.Priority
	}
	if b.Spec.Priority != nil {
		pb = *b.Spec.Priority
	}
	if pa != pb {
		if pa > pb {
			return -1
		}
		return 1
	}
	qa, qb := qos.Class(a) == v1.PodQOSGuaranteed, qos.Class(b) == v1.PodQOSGuaranteed
	if qa != qb {
		if qa {
			return -1
		}
		return 1
	}
	ta, oka := d.deps.resizes.pendingSince(a.UID)
	tb, okb := d.deps.resizes.pendingSince(b.UID)
	switch {
	case oka && okb:
		return ta.Compare(tb)
	case oka:
		return -1
	case okb:
		return 1
	}
	return 0
}

// growsRequests says whether the pod's spec asks for more cpu or memory
// than it was allocated.
func (d *Dispatcher) growsRequests(pod *v1.Pod) bool {
	allocated, _ := d.deps.alloc.Apply(pod)
	old := resourcehelper.PodRequests(allocated, resourcehelper.PodResourcesOptions{})
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return want.Cpu().Cmp(*old.Cpu()) > 0 || want.Memory().Cmp(*old.Memory()) > 0
}

// judgeResize allocates what the pod's spec asks for if it fits, or
// marks the resize Deferred with the reason it does not. d.judging is
// held.
func (d *Dispatcher) judgeResize(ctx context.Context, pod *v1.Pod) {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	now := d.cfg.Clock.Now()
	d.mu.Lock()
	var others []*v1.Pod
	for _, p := range d.admittedLocked() {
		if p.UID != pod.UID {
			others = append(others, p)
		}
	}
	w := d.workers[pod.UID]
	d.mu.Unlock()
	r := admission.Result{Admit: true}
	if d.cfg.Allocatable != nil {
		r = admission.FitResize(pod, d.cfg.Allocatable(), others)
	}
	if !r.Admit {
		logger.V(2).Info("Pod resize deferred", "reason", r.Reason, "message", r.Message)
		if d.deps.resizes.setPending(pod.UID, r.Reason, r.Message, pod.Generation, now) {
			d.deps.events.Eventf(pod, v1.EventTypeWarning, eventResizeDeferred, "%s",
				resizeMessage("Pod resize "+v1.PodReasonDeferred, pod, pod.Generation, r.Message))
			if w != nil {
				w.poke() // its status shows the condition
			}
		}
		return
	}
	if err := d.deps.alloc.SetAllocated(pod); err != nil {
		logger.Error(err, "Recording a pod resize failed; it will be tried again")
		return
	}
	d.mu.Lock()
	if d.resizing[pod.UID] == pod {
		delete(d.resizing, pod.UID)
	}
	d.mu.Unlock()
	d.deps.resizes.startResize(pod.UID, pod.Generation, now)
	logger.V(2).Info("Pod resize allocated", "generation", pod.Generation)
	d.deps.events.Eventf(pod, v1.EventTypeNormal, eventResizeStarted, "%s",
		resizeMessage("Pod resize started", pod, pod.Generation, ""))
	if w != nil {
		w.poke()
	}
}

// applyResizes brings the running containers of plan.ContainersToResize
// to their allocated resources, those that shrink first, then lowers
// the pod's cgroup to what the pod now asks for (the pass raised it
// first). It returns the error that stopped it; what was applied is
// recorded either way.
func (p *pass) applyResizes(ctx context.Context) error {
	w, pod := p.w, p.pod
	for _, r := range p.step.plan.ContainersToResize {
		c, _ := specContainer(pod, r.name, r.init)
		if c == nil {
			continue
		}
		res := qos.ContainerResources(pod, c, w.settings.resources)
		p.changed = true
		err := w.timed(ctx, "resizeContainer:"+c.Name, func(ctx context.Context) error {
			return w.deps.runtime.UpdateContainerResources(ctx, r.id, &runtimeapi.ContainerResources{Linux: res})
		})
		if err != nil {
			return fmt.Errorf("resize container %s: %w", c.Name, err)
		}
		if err := w.deps.alloc.SetActuated(pod.UID, c.Name, c.Resources); err != nil {
			klog.FromContext(ctx).Error(err, "Recording a container's resize failed", "container", c.Name)
		}
	}
	if cg := w.deps.cgroups; cg != nil {
		if err := cg.SettlePod(ctx, pod); err != nil {
			return fmt.Errorf("resize pod cgroup: %w", err)
		}
	}
	return nil
}

// resizeProgress updates the pod's PodResizeInProgress condition after a
// sync pass: still in progress while the pass found running containers
// to resize (with the error that stopped it, if any), else done
// (ResizeCompleted, once per allocated resize).
func (w *Worker) resizeProgress(pod *v1.Pod, s step, o outcome) {
	now := w.deps.clock.Now()
	if len(s.plan.ContainersToResize) > 0 || len(s.plan.ResizeRestarts) > 0 {
		reason, msg := "", ""
		if o.resizeErr != nil {
			reason, msg = v1.PodReasonError, o.resizeErr.Error()
		}
		if w.deps.resizes.setInProgress(w.uid, reason, msg, pod.Generation, now) && o.resizeErr != nil {
			w.deps.events.Eventf(pod, v1.EventTypeWarning, eventResizeError, "%s",
				resizeMessage("Pod resize error", pod, pod.Generation, msg))
		}
		return
	}
	if generation, had := w.deps.resizes.clearInProgress(w.uid); had {
		w.deps.events.Eventf(pod, v1.EventTypeNormal, eventResizeCompleted, "%s",
			resizeMessage("Pod resize completed", pod, generation, ""))
	}
}

// forgetAllocations drops the allocations of pods the agent neither
// holds nor finds in the runtime: they went while it was not running.
func (d *Dispatcher) forgetAllocations(ctx context.Context, known []runtime.PodRef) {
	held := d.PodsHeld()
	for _, ref := range known {
		held[ref.UID] = true
	}
	if err := d.deps.alloc.Retain(func(uid types.UID) bool { _, ok := held[uid]; return ok }); err != nil {
		klog.FromContext(ctx).Error(err, "Forgetting the allocations of gone pods failed")
	}
}
