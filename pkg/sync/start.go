package sync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/poddir"
	"github.com/nodeagent/nodeagent/pkg/qos"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// Event reasons, as the kubelet names them.
const (
	eventCreated       = "Created"
	eventStarted       = "Started"
	eventFailed        = "Failed"
	eventBackOff       = "BackOff"
	eventKilling       = "Killing"
	eventPulling       = "Pulling"
	eventPulled        = "Pulled"
	eventSandboxFailed = "FailedCreatePodSandBox"
	eventCgroupFailed  = "FailedCreatePodContainer"
	reasonCrashLoop    = "CrashLoopBackOff"
	reasonCreateError  = "CreateContainerError"
	reasonStartError   = "RunContainerError"
	reasonConfigError  = "CreateContainerConfigError"
	logDirMode         = 0o755
)

// pass is one sync pass of a running pod: what it learns on the way (the
// sandbox, its addresses, the image volumes) and what it comes to.
type pass struct {
	w          *Worker
	pod        *v1.Pod
	observed   *runtime.PodStatus
	step       step
	sandboxCfg *runtimeapi.PodSandboxConfig
	// podIPs are the addresses of the pod's current sandbox, known once
	// the sandbox exists (the node's for a host-network pod).
	podIPs []string
	// userns is the pod's own user namespace (hostUsers: false), nil for
	// a pod in the host's.
	userns *runtimeapi.UserNamespace
	// imageVolumes are the pod's image volumes as this pass pulled them,
	// nil until a container is about to start.
	imageVolumes map[string]imageVolume
	// changed: this pass changed the runtime.
	changed bool
	out     outcome
}

// wait notes that the pass wants another look within d.
func (p *pass) wait(d time.Duration) {
	if d > 0 && (p.out.next <= 0 || d < p.out.next) {
		p.out.next = d
	}
}

// setWaiting records why a container waits (nil: it no longer does).
func (p *pass) setWaiting(name string, w *status.Waiting) {
	if p.out.waiting == nil {
		p.out.waiting = map[string]*status.Waiting{}
	}
	p.out.waiting[name] = w
}

// waiting is why the container waits, as last recorded.
func (p *pass) waiting(name string) status.Waiting {
	if w, ok := p.out.waiting[name]; ok {
		if w == nil {
			return status.Waiting{}
		}
		return *w
	}
	return p.w.state.waiting[name]
}

// syncPod carries out one sync step, in the order the kubelet's SyncPod
// tells it: pod cgroup, volumes, the kills of the plan, the sandbox, then
// ephemeral containers, sidecars to restart, and either the next init
// container or the app containers, each with its image. The pass runs
// under a context that a deletion of the pod ends.
func (w *Worker) syncPod(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus, s step) outcome {
	ctx, done := w.passContext(ctx)
	defer done()
	p := &pass{w: w, pod: pod, observed: observed, step: s}
	for _, h := range s.holds {
		c, init := specContainer(pod, h.name, h.init)
		if c != nil {
			w.deps.events.Eventf(containerRef(pod, c, init), v1.EventTypeWarning, eventBackOff, "Back-off restarting failed container %s in pod %s", c.Name, podDesc(pod))
		}
	}
	p.run(ctx)
	// Whatever this pass did to the runtime, the next one must see all
	// of it: a relist taken halfway (a container created, not yet
	// started) would make it act twice.
	if p.changed {
		w.acted()
	}
	return p.out
}

func (p *pass) run(ctx context.Context) {
	w, pod, plan := p.w, p.pod, p.step.plan
	logger := klog.FromContext(ctx)
	opts := w.settings.podOptions
	if cg := w.deps.cgroups; cg != nil {
		// A cgroup that is there as asked is no step: a running pod's resync
		// neither times, logs nor records it.
		parent, ready := cg.PodReady(pod)
		opts.CgroupParent = parent
		var err error
		if !ready {
			err = w.timed(ctx, "podCgroup", func(ctx context.Context) error {
				parent, err := cg.EnsurePod(ctx, pod)
				opts.CgroupParent = parent
				return err
			})
		}
		if err != nil {
			w.deps.events.Eventf(pod, v1.EventTypeWarning, eventCgroupFailed, "unable to ensure pod container exists: %v", err)
			p.wait(time.Second)
			return
		}
	}
	// Volumes first: nothing of the pod is created until every one is set up.
	wait, err := w.mountVolumes(ctx, pod)
	p.wait(wait)
	if err != nil {
		return
	}
	if plan.KillPod {
		p.changed = true
		if err := w.killPod(ctx, pod, p.observed, gracePeriod(pod)); err != nil {
			logger.Error(err, "Stopping the pod before recreating its sandbox failed")
			p.wait(time.Second)
			return
		}
	}
	for _, id := range plan.ContainersToKill {
		p.changed = true
		if err := w.replaceContainer(ctx, pod, p.observed, id); err != nil {
			logger.Error(err, "Stopping a changed container failed")
			p.wait(time.Second)
			return
		}
	}
	for _, id := range plan.ResizeRestarts {
		p.changed = true
		if err := w.restartForResize(ctx, pod, p.observed, id); err != nil {
			logger.Error(err, "Stopping a container whose resize needs a restart failed")
			p.out.resizeErr = err
			p.wait(time.Second)
			return
		}
	}
	if len(plan.ContainersToResize) > 0 {
		if err := p.applyResizes(ctx); err != nil {
			logger.Error(err, "Resizing the pod's containers failed, will retry")
			p.out.resizeErr = err
			p.wait(syncErrorRetry)
		}
	}
	for _, k := range plan.ProbeKills {
		p.changed = true
		if err := w.killForProbe(ctx, pod, p.observed, k); err != nil {
			logger.Error(err, "Stopping a container that failed its probe failed")
			p.wait(time.Second)
			return
		}
	}
	for _, id := range plan.SandboxesToStop {
		p.changed = true
		logger.Info("Stopping a second ready sandbox of the pod, which holds nothing", "podSandboxID", id)
		if err := w.timed(ctx, "stopSandbox", func(ctx context.Context) error { return w.deps.runtime.StopPodSandbox(ctx, id) }); err != nil {
			logger.Error(err, "Stopping a duplicate sandbox failed, will retry")
			p.wait(time.Second)
		}
	}
	for _, id := range plan.ContainersToRemove {
		p.changed = true
		if err := w.deps.runtime.RemoveContainer(ctx, id); err != nil {
			logger.V(2).Info("Removing a dead container failed", "containerID", id, "err", err.Error())
		}
	}

	// Only a pass that creates something needs the sandbox config: building
	// it reads the host's resolv.conf, which a resync of a running pod need not.
	var warnings []runtime.Warning
	if plan.createsAnything() {
		var ok bool
		if warnings, ok = p.buildSandboxConfig(ctx, opts); !ok {
			return
		}
	}
	sandboxID := plan.SandboxID
	if plan.CreateSandbox {
		for _, warn := range warnings {
			w.deps.events.Eventf(pod, v1.EventTypeWarning, warn.Reason, "%s", warn.Message)
		}
		err := w.timed(ctx, "sandbox", func(ctx context.Context) error {
			if err := os.MkdirAll(p.sandboxCfg.LogDirectory, logDirMode); err != nil {
				return fmt.Errorf("create pod log directory: %w", err)
			}
			handler, err := w.runtimeHandler(ctx, pod)
			if err != nil {
				return err
			}
			// A turn among the sandboxes being created (sandboxesPerCPU): the
			// wait is part of the step.
			release, err := w.deps.sandboxes.slot(ctx)
			if err != nil {
				return err
			}
			defer release()
			p.changed = true
			id, err := w.deps.runtime.RunPodSandbox(ctx, p.sandboxCfg, handler)
			sandboxID = id
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				w.deps.events.Eventf(pod, v1.EventTypeWarning, eventSandboxFailed, "Failed to create pod sandbox: %v", runtimeError(err))
				p.out.sandboxFailed = true
			}
			p.wait(sandboxBackoff)
			return
		}
	}

	p.podIPs = w.sandboxIPs(ctx, pod, p.observed, sandboxID)
	if plan.CreateSandbox {
		p.sandboxReady(sandboxID)
	}

	// Ephemeral containers first, as the kubelet does: a debugger can then
	// start in a pod whose init containers cannot.
	for _, i := range plan.EphemeralToStart {
		c := (*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		p.startContainer(ctx, c, ephemeralContainer, sandboxID)
	}
	for _, i := range plan.SidecarsToStart {
		p.startContainer(ctx, &pod.Spec.InitContainers[i], initContainer, sandboxID)
	}
	// Containers a killed agent created and never started are started as
	// they are; the plan holds no new start of the same container.
	for _, id := range plan.ContainersToStartExisting {
		p.startExisting(ctx, id)
	}
	if plan.NextInit >= 0 {
		p.startContainer(ctx, &pod.Spec.InitContainers[plan.NextInit], initContainer, sandboxID)
		return
	}
	for _, i := range plan.ContainersToStart {
		p.startContainer(ctx, &pod.Spec.Containers[i], appContainer, sandboxID)
	}
}

// buildSandboxConfig sets the pass's sandbox config and user namespace,
// returning the config's warnings; on a failure it records it and says no.
func (p *pass) buildSandboxConfig(ctx context.Context, opts runtime.PodOptions) ([]runtime.Warning, bool) {
	w, pod, plan := p.w, p.pod, p.step.plan
	userns, err := w.userNamespace(ctx, pod, plan.CreateSandbox)
	if err != nil {
		w.deps.events.Eventf(pod, v1.EventTypeWarning, eventSandboxFailed, "Failed to create pod sandbox: %v", err)
		p.out.sandboxFailed = plan.CreateSandbox
		p.wait(sandboxBackoff)
		return nil, false
	}
	p.userns, opts.Security.UserNamespace = userns, userns
	sandboxCfg, warnings, err := runtime.SandboxConfig(pod, plan.SandboxAttempt, opts)
	if err != nil {
		w.deps.events.Eventf(pod, v1.EventTypeWarning, eventSandboxFailed, "Failed to create pod sandbox: %v", err)
		p.out.sandboxFailed = plan.CreateSandbox
		p.wait(time.Second)
		return nil, false
	}
	sandboxCfg.Linux.Resources = qos.SandboxResources(pod, w.settings.resources)
	sandboxCfg.Linux.Overhead = qos.OverheadResources(pod, w.settings.resources)
	p.sandboxCfg = sandboxCfg
	return warnings, true
}

// containerKind is the list of the pod's spec a container comes from.
type containerKind int

const (
	appContainer containerKind = iota
	initContainer
	ephemeralContainer
)

// startContainer pulls the container's image, then creates and starts
// it. A failure is recorded as the container's waiting reason, and the
// pass asks to look again when it may be retried.
func (p *pass) startContainer(ctx context.Context, c *v1.Container, kind containerKind, sandboxID string) {
	w, pod := p.w, p.pod
	init := kind == initContainer
	ref := containerRef(pod, c, init)
	restartCount := int32(0)
	if prev := latestOf(p.observed, c.Name, init); prev != nil && kind != ephemeralContainer {
		restartCount = prev.RestartCount + 1
	}
	fail := func(reason string, err error, retry time.Duration) { p.failed(ctx, c, ref, reason, err, retry) }

	if f := p.imageVolumesFailure(ctx, c, ref); f != nil {
		p.wait(f.retry)
		return
	}
	image, err := p.ensureImage(ctx, c, ref)
	if err != nil {
		return
	}
	in, err := p.containerInputs(ctx, c, init, image, restartCount)
	if err == nil && kind == ephemeralContainer {
		in.Ephemeral = true
		in.TargetID, err = ephemeralTarget(pod, c.Name, p.observed)
	}
	if err != nil {
		fail(reasonConfigError, err, time.Second)
		return
	}
	cfg := runtime.ContainerConfig(pod, c, in)
	var id string
	err = w.timed(ctx, "createContainer:"+c.Name, func(ctx context.Context) error {
		if err := os.MkdirAll(filepath.Join(p.sandboxCfg.LogDirectory, c.Name), logDirMode); err != nil {
			return fmt.Errorf("create container log directory: %w", err)
		}
		var err error
		p.changed = true
		id, err = w.deps.runtime.CreateContainer(ctx, sandboxID, cfg, p.sandboxCfg)
		return err
	})
	p.observeImageVolumes(c, err)
	if err != nil {
		fail(reasonCreateError, err, time.Second)
		return
	}
	if kind != ephemeralContainer {
		if err := w.deps.alloc.SetActuated(pod.UID, c.Name, c.Resources); err != nil {
			klog.FromContext(ctx).Error(err, "Recording a container's resources failed", "container", c.Name)
		}
	}
	w.deps.events.Eventf(ref, v1.EventTypeNormal, eventCreated, "Container created")
	if d := w.settings.createStartDelay; d > 0 {
		// Tests only (Config.CreateStartDelay): a pod deleted meanwhile
		// cuts the wait short, and the start then fails as it would.
		t := w.deps.clock.NewTimer(d)
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		t.Stop()
	}
	p.startCreated(ctx, c, init, id)
}

// startExisting starts a container that an agent killed between create
// and start left created (see leftover), in place of a new one: what is
// left of its start is the start itself and its postStart hook.
func (p *pass) startExisting(ctx context.Context, id string) {
	for _, o := range p.observed.Containers {
		if o.ID != id {
			continue
		}
		c, init := specContainer(p.pod, o.Name, o.Init)
		if c == nil {
			return
		}
		klog.FromContext(ctx).V(2).Info("Starting a container left created", "container", o.Name, "containerID", id)
		p.startCreated(ctx, c, init, id)
		return
	}
}

// startCreated starts a created container and runs its postStart hook. A
// failed start is recorded, so that the container is replaced rather
// than started again.
func (p *pass) startCreated(ctx context.Context, c *v1.Container, init bool, id string) {
	w := p.w
	ref := containerRef(p.pod, c, init)
	p.changed = true
	err := w.timed(ctx, "startContainer:"+c.Name, func(ctx context.Context) error { return w.deps.runtime.StartContainer(ctx, id) })
	if runtime.StartedElsewhere(err) {
		// A killed agent's start of it, still under way in the runtime or
		// just ended: the runtime's next answer says how it went.
		klog.FromContext(ctx).V(2).Info("Container being started by an earlier call", "container", c.Name, "containerID", id, "err", err)
		p.wait(time.Second)
		return
	}
	if err != nil {
		p.out.startsFailed = append(p.out.startsFailed, id)
		p.failed(ctx, c, ref, reasonStartError, err, time.Second)
		return
	}
	p.setWaiting(c.Name, nil)
	w.deps.events.Eventf(ref, v1.EventTypeNormal, eventStarted, "Container started")
	if msg, ok := p.runPostStart(ctx, c, init, id); !ok {
		p.setWaiting(c.Name, &status.Waiting{Reason: reasonPostStartHookError, Message: msg})
		p.wait(time.Second)
	}
}

// failed records why a container could not be started as its waiting
// reason, with a Failed event, and asks to look again after retry.
func (p *pass) failed(ctx context.Context, c *v1.Container, ref *v1.ObjectReference, reason string, err error, retry time.Duration) {
	if ctx.Err() != nil {
		// The pod is being deleted: what failed no longer matters.
		return
	}
	p.setWaiting(c.Name, &status.Waiting{Reason: reason, Message: err.Error()})
	p.w.deps.events.Eventf(ref, v1.EventTypeWarning, eventFailed, "Error: %v", err)
	p.wait(retry)
}

// runtimeError is the runtime's own error within err, the gRPC status
// the kubelet shows users unadorned; err itself when it holds none.
func runtimeError(err error) error {
	var se interface{ GRPCStatus() *grpcstatus.Status }
	if errors.As(err, &se) {
		if e, ok := se.(error); ok {
			return e
		}
	}
	return err
}

// ephemeralTarget is the runtime ID of the container an ephemeral
// container targets (shares the PID namespace of), or "" when it names
// none. The target must have been created: ephemeral containers are added
// to running pods, so it normally has.
func ephemeralTarget(pod *v1.Pod, name string, observed *runtime.PodStatus) (string, error) {
	for i := range pod.Spec.EphemeralContainers {
		ec := &pod.Spec.EphemeralContainers[i]
		if ec.Name != name || ec.TargetContainerName == "" {
			continue
		}
		for _, c := range observed.ContainersNamed(ec.TargetContainerName) {
			if !c.Ephemeral {
				return c.ID, nil
			}
		}
		return "", fmt.Errorf("unable to find target container %s", ec.TargetContainerName)
	}
	return "", nil
}

// podDir is where the pod's own files lie on the node.
func (w *Worker) podDir(pod *v1.Pod) poddir.Pod {
	return poddir.New(w.settings.rootDir).Pod(pod.UID)
}

// containerRef is the object events about one container refer to.
func containerRef(pod *v1.Pod, c *v1.Container, init bool) *v1.ObjectReference {
	field := fmt.Sprintf("spec.containers{%s}", c.Name)
	switch {
	case init:
		field = fmt.Sprintf("spec.initContainers{%s}", c.Name)
	case isEphemeral(pod, c.Name):
		field = fmt.Sprintf("spec.ephemeralContainers{%s}", c.Name)
	}
	return &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion, FieldPath: field}
}

// podDesc names a pod in messages the way the kubelet does.
func podDesc(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// timed runs one step of a pod's life, timed, logs it as one line,
// records it in the pod's timeline and traces it: fn runs under a context
// that carries the step's span.
func (w *Worker) timed(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	start := w.deps.clock.Now()
	pod := w.timelinePod()
	id := w.deps.timeline.Begin(pod, name, start)
	// The step's span rides fn's context to the calls it makes.
	sctx, span := w.deps.tracer.Step(ctx, pod, name, start)
	err := fn(sctx)
	logger := klog.FromContext(ctx)
	end := w.deps.clock.Now()
	d := end.Sub(start)
	w.deps.timeline.End(w.uid, id, end, err)
	span.End(end, err)
	if err != nil {
		logger.Info("Pod step failed", "step", name, "duration", d, "err", err.Error())
		return err
	}
	logger.V(2).Info("Pod step done", "step", name, "duration", d)
	return nil
}

// restartForResize stops a running container whose resize policy asks
// for a restart to take new resources; its successor is created with
// them.
func (w *Worker) restartForResize(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus, id string) error {
	for _, c := range observed.Containers {
		if c.ID != id {
			continue
		}
		spec, init := specContainer(pod, c.Name, c.Init)
		if spec == nil {
			return nil
		}
		w.deps.events.Eventf(containerRef(pod, spec, init), v1.EventTypeNormal, eventKilling,
			"Container %s resize requires restart", c.Name)
		return w.stopContainer(ctx, pod, spec, c.Name, id, podIP(pod, observed), gracePeriod(pod))
	}
	return nil
}

// replaceContainer stops a running container whose spec changed, within
// the pod's grace period, so that the new one can start.
func (w *Worker) replaceContainer(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus, id string) error {
	for _, c := range observed.Containers {
		if c.ID != id {
			continue
		}
		spec, init := specContainer(pod, c.Name, c.Init)
		if spec != nil {
			w.deps.events.Eventf(containerRef(pod, spec, init), v1.EventTypeNormal, eventKilling,
				"Container %s definition changed, will be restarted", c.Name)
		}
		return w.stopContainer(ctx, pod, spec, c.Name, id, podIP(pod, observed), gracePeriod(pod))
	}
	return nil
}
