package sync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

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

// syncPod is one pass of a running pod, in the order the kubelet's
// SyncPod tells it: pod cgroup, pod directories, sandbox, then either the next init
// container or the app containers, each with its image. It reports when
// to look again and whether the pod has ended.
func (w *Worker) syncPod(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus) (time.Duration, bool) {
	logger := klog.FromContext(ctx)
	plan := computePodActions(pod, observed, w.probeResults(observed))
	if plan.Done {
		return 0, true
	}
	next := w.d.cfg.ResyncPeriod
	defer func() {
		w.d.cfg.Probes.UpdatePod(pod, observed)
		st := w.computeStatus(pod, observed, false)
		w.start.observe(w.d.cfg.Metrics, pod, st, w.d.cfg.Clock.Now())
		w.d.cfg.Status.Set(pod, st)
	}()
	// Whatever this pass does to the runtime, the next one must see all
	// of it: a relist taken halfway (a container created, not yet
	// started) would make it act twice.
	w.changed = false
	w.imageVolumes.pulled = false
	defer func() {
		if w.changed {
			w.acted()
		}
	}()

	opts := w.d.cfg.PodOptions
	if cg := w.d.cfg.Cgroups; cg != nil {
		err := w.step(ctx, "podCgroup", func() error {
			parent, err := cg.EnsurePod(ctx, pod)
			opts.CgroupParent = parent
			return err
		})
		if err != nil {
			w.d.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, eventCgroupFailed, "unable to ensure pod container exists: %v", err)
			return time.Second, false
		}
	}
	// Volumes first: nothing of the pod is created until every one is set up.
	wait, err := w.mountVolumes(ctx, pod)
	if err != nil {
		return wait, false
	}
	next = min(next, wait)
	if plan.KillPod {
		if err := w.killPod(ctx, pod, observed, gracePeriod(pod)); err != nil {
			logger.Error(err, "Stopping the pod before recreating its sandbox failed")
			return time.Second, false
		}
	}
	for _, id := range plan.ContainersToKill {
		w.changed = true
		if err := w.replaceContainer(ctx, pod, observed, id); err != nil {
			logger.Error(err, "Stopping a changed container failed")
			return time.Second, false
		}
	}
	for _, k := range plan.ProbeKills {
		w.changed = true
		if err := w.killForProbe(ctx, pod, observed, k); err != nil {
			logger.Error(err, "Stopping a container that failed its probe failed")
			return time.Second, false
		}
	}
	for _, id := range plan.ContainersToRemove {
		w.changed = true
		if err := w.d.cfg.Runtime.RemoveContainer(ctx, id); err != nil {
			logger.V(2).Info("Removing a dead container failed", "containerID", id, "err", err.Error())
		}
	}

	sandboxCfg, warnings, err := runtime.SandboxConfig(pod, plan.SandboxAttempt, opts)
	if err != nil {
		w.d.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, eventSandboxFailed, "Failed to create pod sandbox: %v", err)
		return time.Second, false
	}
	sandboxCfg.Linux.Resources = qos.SandboxResources(pod, w.d.cfg.Resources)
	sandboxCfg.Linux.Overhead = qos.OverheadResources(pod, w.d.cfg.Resources)
	sandboxID := plan.SandboxID
	if plan.CreateSandbox {
		for _, warn := range warnings {
			w.d.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, warn.Reason, "%s", warn.Message)
		}
		err := w.step(ctx, "sandbox", func() error {
			if err := os.MkdirAll(sandboxCfg.LogDirectory, logDirMode); err != nil {
				return fmt.Errorf("create pod log directory: %w", err)
			}
			w.changed = true
			id, err := w.d.cfg.Runtime.RunPodSandbox(ctx, sandboxCfg, w.d.cfg.RuntimeHandler)
			sandboxID = id
			return err
		})
		if err != nil {
			w.d.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, eventSandboxFailed, "Failed to create pod sandbox: %v", err)
			return time.Second, false
		}
	}

	w.podIPs = w.sandboxIPs(ctx, pod, observed, sandboxID)

	// Ephemeral containers first, as the kubelet does: a debugger can then
	// start in a pod whose init containers cannot.
	for _, i := range plan.EphemeralToStart {
		c := (*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		if wait := w.startContainer(ctx, pod, c, ephemeralContainer, observed, sandboxID, sandboxCfg); wait > 0 {
			next = min(next, wait)
		}
	}
	for _, i := range plan.SidecarsToStart {
		if wait := w.startContainer(ctx, pod, &pod.Spec.InitContainers[i], initContainer, observed, sandboxID, sandboxCfg); wait > 0 {
			next = min(next, wait)
		}
	}
	if plan.NextInit >= 0 {
		c := &pod.Spec.InitContainers[plan.NextInit]
		if wait := w.startContainer(ctx, pod, c, initContainer, observed, sandboxID, sandboxCfg); wait > 0 {
			next = min(next, wait)
		}
		return next, false
	}
	for _, i := range plan.ContainersToStart {
		c := &pod.Spec.Containers[i]
		if wait := w.startContainer(ctx, pod, c, appContainer, observed, sandboxID, sandboxCfg); wait > 0 {
			next = min(next, wait)
		}
	}
	return next, false
}

// containerKind is the list of the pod's spec a container comes from.
type containerKind int

const (
	appContainer containerKind = iota
	initContainer
	ephemeralContainer
)

// startContainer pulls the container's image, then creates and starts it,
// unless its restart back-off holds it back. It returns how long until it
// should be tried again (zero when started or not to be retried soon).
func (w *Worker) startContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, kind containerKind, observed *runtime.PodStatus, sandboxID string, sandboxCfg *runtimeapi.PodSandboxConfig) time.Duration {
	init := kind == initContainer
	ref := containerRef(pod, c, init)
	prev := latestOf(observed, c.Name, init)
	restartCount := int32(0)
	key := string(pod.UID) + "/" + c.Name
	if prev != nil && kind != ephemeralContainer {
		restartCount = prev.RestartCount + 1
		if prev.State == runtime.ContainerExited {
			ran := prev.FinishedAt.Sub(prev.StartedAt)
			if wait := w.restarts.remaining(key, prev.FinishedAt, ran); wait > 0 {
				msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", w.restarts.delay(key), c.Name, podDesc(pod))
				w.waiting[c.Name] = status.Waiting{Reason: reasonCrashLoop, Message: msg}
				w.d.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, eventBackOff, "Back-off restarting failed container %s in pod %s", c.Name, podDesc(pod))
				return wait
			}
			w.restarts.next(key)
		}
	}

	if fail := w.imageVolumesFailure(ctx, pod, c, ref, sandboxCfg); fail != nil {
		return fail.retry
	}
	image, wait, err := w.ensureImage(ctx, pod, c, ref, sandboxCfg)
	if err != nil {
		return wait
	}
	in, err := w.containerInputs(ctx, pod, c, init, image, restartCount, sandboxCfg)
	if err == nil && kind == ephemeralContainer {
		in.Ephemeral = true
		in.TargetID, err = ephemeralTarget(pod, c.Name, observed)
	}
	if err != nil {
		w.waiting[c.Name] = status.Waiting{Reason: reasonConfigError, Message: err.Error()}
		w.d.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, eventFailed, "Error: %v", err)
		return time.Second
	}
	cfg := runtime.ContainerConfig(pod, c, in)
	var id string
	err = w.step(ctx, "createContainer:"+c.Name, func() error {
		if err := os.MkdirAll(filepath.Join(sandboxCfg.LogDirectory, c.Name), logDirMode); err != nil {
			return fmt.Errorf("create container log directory: %w", err)
		}
		var err error
		w.changed = true
		id, err = w.d.cfg.Runtime.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
		return err
	})
	w.observeImageVolumes(pod, c, err)
	if err != nil {
		w.waiting[c.Name] = status.Waiting{Reason: reasonCreateError, Message: err.Error()}
		w.d.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, eventFailed, "Error: %v", err)
		return time.Second
	}
	w.d.cfg.Recorder.Eventf(ref, v1.EventTypeNormal, eventCreated, "Container created")
	err = w.step(ctx, "startContainer:"+c.Name, func() error { return w.d.cfg.Runtime.StartContainer(ctx, id) })
	if err != nil {
		w.waiting[c.Name] = status.Waiting{Reason: reasonStartError, Message: err.Error()}
		w.d.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, eventFailed, "Error: %v", err)
		return time.Second
	}
	delete(w.waiting, c.Name)
	w.d.cfg.Recorder.Eventf(ref, v1.EventTypeNormal, eventStarted, "Container started")
	if msg, ok := w.runPostStart(ctx, pod, c, init, id); !ok {
		w.waiting[c.Name] = status.Waiting{Reason: reasonPostStartHookError, Message: msg}
		return time.Second
	}
	return 0
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
	return poddir.New(w.d.cfg.RootDir).Pod(pod.UID)
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

// step runs one step of a pod's start, timed, and logs it as one line.
func (w *Worker) step(ctx context.Context, name string, fn func() error) error {
	start := w.d.cfg.Clock.Now()
	err := fn()
	logger := klog.FromContext(ctx)
	d := w.d.cfg.Clock.Since(start)
	if err != nil {
		logger.Info("Pod step failed", "step", name, "duration", d, "err", err.Error())
		return err
	}
	logger.V(2).Info("Pod step done", "step", name, "duration", d)
	return nil
}

// replaceContainer stops a running container whose spec changed, within
// the pod's grace period, so that the new one can start.
func (w *Worker) replaceContainer(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus, id string) error {
	for _, c := range observed.Containers {
		if c.ID != id {
			continue
		}
		if spec, init := specContainer(pod, c.Name, c.Init); spec != nil {
			w.d.cfg.Recorder.Eventf(containerRef(pod, spec, init), v1.EventTypeNormal, eventKilling,
				"Container %s definition changed, will be restarted", c.Name)
		}
		return w.step(ctx, "stopContainer:"+c.Name, func() error {
			spec, _ := specContainer(pod, c.Name, c.Init)
			return w.stopContainer(ctx, pod, spec, id, podIP(pod, observed), gracePeriod(pod))
		})
	}
	return nil
}
