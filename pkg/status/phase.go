package status

import (
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/qos"
)

// Phase derives the pod phase from its container statuses, given in the
// order of the spec's containers. terminal says the agent has stopped the
// pod for good (deleted, or nothing more will run): a pod that would
// otherwise restart its containers then ends. Whether a stopped container
// restarts is its own to say (RestartsOnExit): one restarting keeps a pod
// Running whose restartPolicy is Never, and one that never restarts ends
// a pod whose restartPolicy is Always.
func Phase(pod *v1.Pod, initStatuses, statuses []v1.ContainerStatus, terminal bool) v1.PodPhase {
	for i, cs := range initStatuses {
		var spec *v1.Container
		if i < len(pod.Spec.InitContainers) {
			spec = &pod.Spec.InitContainers[i]
		}
		if spec != nil && IsSidecar(spec) {
			continue
		}
		t := cs.State.Terminated
		if cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil {
			t = cs.LastTerminationState.Terminated
		}
		if t != nil && t.ExitCode != 0 && (terminal || !restartsOnExit(pod, spec, t.ExitCode)) {
			return v1.PodFailed
		}
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			if terminal {
				return v1.PodFailed
			}
			return v1.PodPending
		}
	}
	var running, waiting, stopped, succeeded, restarting int
	// Sidecars count as running while they run; one that has stopped
	// counts for nothing. One not yet started keeps the pod pending until
	// the app containers have started.
	sidecarPending, appStarted := false, false
	for i, cs := range initStatuses {
		if i >= len(pod.Spec.InitContainers) || !IsSidecar(&pod.Spec.InitContainers[i]) {
			continue
		}
		switch {
		case cs.State.Running != nil:
			running++
			if cs.Started == nil || !*cs.Started {
				sidecarPending = true
			}
		case cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil:
			sidecarPending = true
		}
	}
	for _, cs := range statuses {
		if cs.State.Waiting == nil || cs.LastTerminationState.Terminated != nil {
			appStarted = true
		}
	}
	if sidecarPending && !appStarted && !terminal {
		return v1.PodPending
	}
	for i, cs := range statuses {
		var spec *v1.Container
		if i < len(pod.Spec.Containers) {
			spec = &pod.Spec.Containers[i]
		}
		t := cs.State.Terminated
		switch {
		case cs.State.Running != nil:
			running++
			continue
		case t == nil && cs.State.Waiting != nil:
			if t = cs.LastTerminationState.Terminated; t == nil {
				waiting++
				continue
			}
		case t == nil:
			continue
		}
		stopped++
		if t.ExitCode == 0 {
			succeeded++
		}
		if restartsOnExit(pod, spec, t.ExitCode) {
			restarting++
		}
	}
	switch {
	case terminal && running == 0:
		if stopped > 0 && stopped == succeeded && waiting == 0 {
			return v1.PodSucceeded
		}
		return v1.PodFailed
	case waiting > 0:
		return v1.PodPending
	case running > 0:
		return v1.PodRunning
	case stopped > 0:
		switch {
		case restarting > 0:
			// Between runs of a container that will run again.
			return v1.PodRunning
		case stopped == succeeded:
			return v1.PodSucceeded
		}
		return v1.PodFailed
	}
	return v1.PodPending
}

// RestartsOnExit says whether a container that exited with exitCode is to
// be started again. A container with a restartPolicy of its own decides
// first by its restartPolicyRules, in order: the first whose exit codes
// match and whose action is Restart restarts it; then by its own policy.
// One without falls back to the pod's restartPolicy (Always when unset).
//
// A RestartAllContainers action is not carried out by this agent: it does
// not declare that node feature, so the scheduler keeps such pods off it.
// Like a kubelet without that gate, such a rule falls through to the
// container's policy.
func RestartsOnExit(pod *v1.Pod, c *v1.Container, exitCode int32) bool {
	if c.RestartPolicy != nil {
		if r, ok := matchingRule(c, exitCode); ok && r.Action == v1.ContainerRestartRuleActionRestart {
			return true
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch pod.Spec.RestartPolicy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true
}

// restartsOnExit is RestartsOnExit for a status that may have no spec
// beside it: the pod's policy decides.
func restartsOnExit(pod *v1.Pod, c *v1.Container, exitCode int32) bool {
	if c == nil {
		c = &v1.Container{}
	}
	return RestartsOnExit(pod, c, exitCode)
}

// matchingRule is the first of a container's restart rules whose exit
// codes match exitCode. A rule with no exit codes, or an operator this
// version does not know, matches nothing.
func matchingRule(c *v1.Container, exitCode int32) (v1.ContainerRestartRule, bool) {
	for _, r := range c.RestartPolicyRules {
		if r.ExitCodes == nil {
			continue
		}
		in := slices.Contains(r.ExitCodes.Values, exitCode)
		switch r.ExitCodes.Operator {
		case v1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return r, true
			}
		case v1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return r, true
			}
		}
	}
	return v1.ContainerRestartRule{}, false
}

// QOSClass is the pod's quality-of-service class: the one the apiserver
// recorded, else the one its requests and limits (pod-level ones when
// set) give.
func QOSClass(pod *v1.Pod) v1.PodQOSClass {
	return qos.Class(pod)
}
