package status

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/qos"
)

// Phase derives the pod phase from its container statuses. terminal says
// the agent has stopped the pod for good (deleted, or nothing more will
// run): a pod that would otherwise restart its containers then ends.
func Phase(pod *v1.Pod, initStatuses, statuses []v1.ContainerStatus, terminal bool) v1.PodPhase {
	policy := pod.Spec.RestartPolicy
	for i, cs := range initStatuses {
		if i < len(pod.Spec.InitContainers) && IsSidecar(&pod.Spec.InitContainers[i]) {
			continue
		}
		t := cs.State.Terminated
		if cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil {
			t = cs.LastTerminationState.Terminated
		}
		if t != nil && t.ExitCode != 0 && (policy == v1.RestartPolicyNever || terminal) {
			return v1.PodFailed
		}
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			if terminal {
				return v1.PodFailed
			}
			return v1.PodPending
		}
	}
	var running, waiting, stopped, succeeded int
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
	for _, cs := range statuses {
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case cs.State.Waiting != nil:
			if lt := cs.LastTerminationState.Terminated; lt != nil {
				stopped++
				if lt.ExitCode == 0 {
					succeeded++
				}
			} else {
				waiting++
			}
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
		switch policy {
		case v1.RestartPolicyAlways:
			return v1.PodRunning
		case v1.RestartPolicyOnFailure:
			if stopped == succeeded {
				return v1.PodSucceeded
			}
			return v1.PodRunning
		default:
			if stopped == succeeded {
				return v1.PodSucceeded
			}
			return v1.PodFailed
		}
	}
	return v1.PodPending
}

// QOSClass is the pod's quality-of-service class: the one the apiserver
// recorded, else the one its requests and limits (pod-level ones when
// set) give.
func QOSClass(pod *v1.Pod) v1.PodQOSClass {
	return qos.Class(pod)
}
