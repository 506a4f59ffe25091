package sync

import (
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// sandboxReady tells the status writer at once that the sandbox the pass
// has just made (sandboxID) is up: a pass that makes one goes on to pull
// images and start containers, which may take long, and the pod's
// PodReadyToStartContainers and addresses are not to wait for that, no
// more than they do with the kubelet.
//
// The status is computed as every other one is, from an observation of
// the runtime, here as the pass knows it now (afterSandbox): the sandbox
// as RunPodSandbox made it, with the addresses the pass read for it, and
// the containers' waiting reasons as the pass has left them so far. No
// runtime call is made for it. The pass keeps that observation for its
// closing status, which must not say less than this one.
//
// Nothing is said when the pass cannot tell the truth without asking the
// runtime: the sandbox's addresses are unknown, or the pass stopped
// containers before making it (how they ended is for the next relist).
func (p *pass) sandboxReady(sandboxID string) {
	w, pod := p.w, p.pod
	if !pod.Spec.HostNetwork && len(p.podIPs) == 0 {
		return
	}
	now := w.deps.clock.Now()
	sb := &runtime.SandboxStatus{ID: sandboxID, Attempt: p.step.plan.SandboxAttempt, Ready: true, CreatedAt: now}
	if !pod.Spec.HostNetwork {
		// A host-network pod's sandbox has no addresses of its own.
		sb.IPs = p.podIPs
	}
	observed, ok := afterSandbox(p.observed, sb)
	if !ok {
		return
	}
	p.out.observed = observed
	waiting := advance(w.state, p.step, p.out, now).waiting
	w.publish(pod, w.statusFrom(pod, observed, waiting, false))
}

// afterSandbox is observed as a pass that made the new sandbox sb sees
// the runtime: sb first (the newest), the pod's other sandboxes stopped
// (a new sandbox is made only once the old ones are: podActions.KillPod),
// the containers as they were. It is not ok when observed holds a
// container the pass has stopped since, whose end it does not know.
func afterSandbox(observed *runtime.PodStatus, sb *runtime.SandboxStatus) (*runtime.PodStatus, bool) {
	out := &runtime.PodStatus{Sandboxes: []*runtime.SandboxStatus{sb}}
	if observed == nil {
		return out, true
	}
	for _, c := range observed.Containers {
		if c.State == runtime.ContainerRunning || c.State == runtime.ContainerCreated || c.State == runtime.ContainerUnknown {
			return nil, false
		}
	}
	out.PodRef, out.Containers = observed.PodRef, observed.Containers
	for _, old := range observed.Sandboxes {
		stopped := *old
		stopped.Ready = false
		out.Sandboxes = append(out.Sandboxes, &stopped)
	}
	return out, true
}
