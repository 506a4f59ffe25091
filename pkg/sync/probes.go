package sync

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/probe"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// Event reasons and the waiting reason of hooks, as the kubelet names them.
const (
	eventFailedPostStartHook = "FailedPostStartHook"
	eventFailedPreStopHook   = "FailedPreStopHook"
	reasonPostStartHookError = "PostStartHookError"
)

// Prober runs the probes of pods' running containers (pkg/probe.Manager).
type Prober interface {
	// UpdatePod starts and stops probes to match the pod's running containers.
	UpdatePod(pod *v1.Pod, observed *runtime.PodStatus)
	// RemovePod stops all of the pod's probes.
	RemovePod(uid types.UID)
	// Results are the probes' verdicts on one running container.
	Results(containerID string) probe.Results
}

// HookRunner runs postStart and preStop handlers (pkg/probe.Manager).
type HookRunner interface {
	RunHook(ctx context.Context, t probe.Target, h *v1.LifecycleHandler) (string, error)
}

type noProbes struct{}

func (noProbes) UpdatePod(*v1.Pod, *runtime.PodStatus) {}
func (noProbes) RemovePod(types.UID)                   {}
func (noProbes) Results(string) probe.Results          { return probe.Results{} }
func (noProbes) RunHook(context.Context, probe.Target, *v1.LifecycleHandler) (string, error) {
	return "", fmt.Errorf("no hook runner")
}

// probeResults are the probes' verdicts by container ID, for the running
// containers of one pod.
type probeResults map[string]probe.Results

func (w *Worker) probeResults(observed *runtime.PodStatus) probeResults {
	out := probeResults{}
	for _, c := range observed.Containers {
		if c.State == runtime.ContainerRunning {
			if r := w.deps.probes.Results(c.ID); r != (probe.Results{}) {
				out[c.ID] = r
			}
		}
	}
	return out
}

// statusProbes adapts the prober's verdicts for the status computation.
func (w *Worker) statusProbes(id string) status.ProbeResults {
	r := w.deps.probes.Results(id)
	return status.ProbeResults{Started: r.Startup == probe.Success, Ready: r.Readiness == probe.Success}
}

// probeKill is a running container a liveness or startup probe failed.
type probeKill struct {
	ID, Name string
	Init     bool
	// Message is the Killing event's, in the kubelet's words.
	Message string
	// Grace is the probe's terminationGracePeriodSeconds, when it has one.
	Grace *int64
}

// failedProbe says whether a running container failed its liveness or
// startup probe, and how it is to be killed.
func failedProbe(pod *v1.Pod, spec *v1.Container, c *runtime.ContainerStatus, init bool, probes probeResults) (probeKill, bool) {
	r := probes[c.ID]
	k := probeKill{ID: c.ID, Name: c.Name, Init: init}
	what := "Container"
	if init {
		what = "Init container"
	}
	switch {
	case spec.LivenessProbe != nil && r.Liveness == probe.Failure:
		k.Message, k.Grace = fmt.Sprintf("%s %s failed liveness probe", what, c.Name), spec.LivenessProbe.TerminationGracePeriodSeconds
	case spec.StartupProbe != nil && r.Startup == probe.Failure:
		k.Message, k.Grace = fmt.Sprintf("%s %s failed startup probe", what, c.Name), spec.StartupProbe.TerminationGracePeriodSeconds
	default:
		return k, false
	}
	// A container's own restartPolicy, where it has one, says whether it comes back
	// (no exit code is known yet, so its rules on exit codes cannot decide).
	policy := pod.Spec.RestartPolicy
	if spec.RestartPolicy != nil {
		policy = v1.RestartPolicy(*spec.RestartPolicy)
	}
	if !init && policy != v1.RestartPolicyNever {
		k.Message += ", will be restarted"
	}
	return k, true
}

// killForProbe stops a container its liveness or startup probe failed.
// It is started again, if the restart policy says so, by a later pass.
func (w *Worker) killForProbe(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus, k probeKill) error {
	spec, init := specContainer(pod, k.Name, k.Init)
	if spec == nil {
		return nil
	}
	grace := gracePeriod(pod)
	if k.Grace != nil {
		grace = *k.Grace
	}
	w.deps.events.Eventf(containerRef(pod, spec, init), v1.EventTypeNormal, eventKilling, "%s", k.Message)
	return w.stopContainer(ctx, pod, spec, k.Name, k.ID, podIP(pod, observed), grace)
}

// stopContainer stops the pod's container name (id), in two steps: its
// preStop hook first (preStop:<name>), if spec has one, within the grace
// period, then the runtime's stop (stopContainer:<name>) with what is left
// of it (never less than minGracePeriod). A failed hook does not keep the
// container from stopping.
func (w *Worker) stopContainer(ctx context.Context, pod *v1.Pod, spec *v1.Container, name, id, ip string, grace int64) error {
	if spec != nil && spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil && grace > 0 {
		start := w.deps.clock.Now()
		t := probe.Target{Pod: pod, Container: spec, ContainerID: id, PodIP: ip}
		var msg string
		err := w.timed(ctx, "preStop:"+spec.Name, func(ctx context.Context) error {
			hctx, cancel := context.WithTimeout(ctx, time.Duration(grace)*time.Second)
			defer cancel()
			var err error
			msg, err = w.deps.hooks.RunHook(hctx, t, spec.Lifecycle.PreStop)
			return err
		})
		if err != nil {
			klog.FromContext(ctx).V(1).Info("PreStop hook failed", "container", spec.Name, "err", err.Error())
			w.deps.events.Eventf(containerRef(pod, spec, isInit(pod, spec)), v1.EventTypeWarning, eventFailedPreStopHook, "%s", msg)
		}
		grace -= int64(w.deps.clock.Since(start) / time.Second)
	}
	return w.timed(ctx, "stopContainer:"+name, func(ctx context.Context) error {
		return w.deps.runtime.StopContainer(ctx, id, max(grace, minGracePeriod))
	})
}

// runPostStart runs the container's postStart hook, if any, right after
// it started. A failed hook kills the container, which is then restarted
// (or not) like any that exited; it reports the failure's message.
func (p *pass) runPostStart(ctx context.Context, c *v1.Container, init bool, id string) (string, bool) {
	w, pod := p.w, p.pod
	if c.Lifecycle == nil || c.Lifecycle.PostStart == nil {
		return "", true
	}
	// The pass has read the sandbox's addresses before starting anything.
	ip := pod.Status.PodIP
	if len(p.podIPs) > 0 {
		ip = p.podIPs[0]
	}
	t := probe.Target{Pod: pod, Container: c, ContainerID: id, PodIP: ip}
	var msg string
	err := w.timed(ctx, "postStart:"+c.Name, func(ctx context.Context) error {
		var err error
		msg, err = w.deps.hooks.RunHook(ctx, t, c.Lifecycle.PostStart)
		return err
	})
	if err == nil {
		return "", true
	}
	ref := containerRef(pod, c, init)
	w.deps.events.Eventf(ref, v1.EventTypeWarning, eventFailedPostStartHook, "%s", msg)
	w.deps.events.Eventf(ref, v1.EventTypeNormal, eventKilling, "%s", eventFailedPostStartHook)
	if err := w.deps.runtime.StopContainer(ctx, id, gracePeriod(pod)); err != nil {
		klog.FromContext(ctx).Error(err, "Stopping a container whose postStart hook failed", "container", c.Name)
	}
	return msg, false
}

// podIP is the pod's IP as the runtime shows it, else as last reported.
func podIP(pod *v1.Pod, observed *runtime.PodStatus) string {
	if sb := observed.LatestSandbox(); sb != nil && sb.Ready && len(sb.IPs) > 0 && !pod.Spec.HostNetwork {
		return sb.IPs[0]
	}
	return pod.Status.PodIP
}

func isInit(pod *v1.Pod, c *v1.Container) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}

// gatesChanged says whether a condition named by one of the pod's
// readiness gates changed: someone else wrote it, and the pod's Ready
// condition follows it.
func gatesChanged(a, b *v1.Pod) bool {
	if a == nil || b == nil {
		return false
	}
	for _, g := range b.Spec.ReadinessGates {
		if gateStatus(a, g.ConditionType) != gateStatus(b, g.ConditionType) {
			return true
		}
	}
	return false
}

func gateStatus(p *v1.Pod, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}
