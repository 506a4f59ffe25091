// Package status computes a pod's v1.PodStatus from its spec and what the
// runtime shows, and writes it to the apiserver.
package status

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// Waiting is why a container is not running, as the last sync found it
// (CrashLoopBackOff, ErrImagePull, …); the runtime cannot tell these.
type Waiting struct {
	Reason  string
	Message string
}

// Input is everything a pod's status is computed from.
type Input struct {
	// Pod is the desired pod; its status is the last one the apiserver had.
	Pod *v1.Pod
	// Observed is the runtime's state of the pod.
	Observed *runtime.PodStatus
	// Waiting holds the sync's reasons by container name.
	Waiting map[string]Waiting
	// Terminal is set once the agent has stopped the pod for good: every
	// container is then reported as it ended, and the phase is final.
	Terminal bool
	// NodeIPs are the node's addresses, for hostIP(s) and host-network pods.
	NodeIPs []string
	// RuntimeName prefixes container IDs ("containerd://…").
	RuntimeName string
	// Now stamps transitions and the start time.
	Now time.Time
	// Probes gives the probes' verdicts on a running container, by
	// runtime container ID; nil when nothing is probed.
	Probes func(containerID string) ProbeResults
	// Actuated gives the resources last applied to the running container
	// of a name (in-place resize); nil or not found: those of the spec.
	Actuated func(name string) (v1.ResourceRequirements, bool)
	// ResizeConditions are the pod's PodResizePending and
	// PodResizeInProgress conditions, reported as given.
	ResizeConditions []v1.PodCondition
}

// ProbeResults is what a running container's probes say: whether its
// startup probe has succeeded and whether its readiness probe says ready.
// Either counts only when the container has that probe.
type ProbeResults struct {
	Started, Ready bool
}

// IsSidecar says whether an init container is a restartable one (a
// sidecar): it keeps running beside the app containers.
func IsSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// Condition reasons the agent sets, as the kubelet names them.
const (
	ReasonContainersNotInitialized = "ContainersNotInitialized"
	ReasonContainersNotReady       = "ContainersNotReady"
	ReasonPodCompleted             = "PodCompleted"
	ReasonContainerCreating        = "ContainerCreating"
	ReasonPodInitializing          = "PodInitializing"
	ReasonReadinessGatesNotReady   = "ReadinessGatesNotReady"
)

// Compute returns the pod's status. It is a pure function of in.
func Compute(in Input) v1.PodStatus {
	pod := in.Pod
	old := pod.Status
	st := v1.PodStatus{
		QOSClass:           QOSClass(pod),
		ObservedGeneration: pod.Generation,
		StartTime:          old.StartTime,
	}
	if st.StartTime == nil {
		t := metav1.NewTime(in.Now).Rfc3339Copy()
		st.StartTime = &t
	}
	if len(in.NodeIPs) > 0 {
		st.HostIP = in.NodeIPs[0]
		for _, ip := range in.NodeIPs {
			st.HostIPs = append(st.HostIPs, v1.HostIP{IP: ip})
		}
	}
	st.PodIP, st.PodIPs = podIPs(pod, in)

	hasInit := len(pod.Spec.InitContainers) > 0
	defaultWaiting := ReasonContainerCreating
	if hasInit {
		defaultWaiting = ReasonPodInitializing
	}
	for i := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses,
			containerStatus(&pod.Spec.InitContainers[i], initKind, defaultWaiting, in))
	}
	for i := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses,
			containerStatus(&pod.Spec.Containers[i], appKind, defaultWaiting, in))
	}
	// Ephemeral containers are reported like app containers, but they count
	// for neither the phase nor readiness, nor are they probed.
	for i := range pod.Spec.EphemeralContainers {
		c := (*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		st.EphemeralContainerStatuses = append(st.EphemeralContainerStatuses,
			containerStatus(c, ephemeralKind, defaultWaiting, in))
	}
	if in.Terminal {
		markUnknown(pod, &st)
	}
	st.Phase = Phase(pod, st.InitContainerStatuses, st.ContainerStatuses, in.Terminal)
	if old.Phase == v1.PodSucceeded || old.Phase == v1.PodFailed {
		st.Phase = old.Phase
	}
	setResources(pod, &st, in)
	st.Conditions = append(conditions(pod, &st, in), in.ResizeConditions...)
	runtime.TrimTerminationMessages(pod, &st)
	return st
}

func podIPs(pod *v1.Pod, in Input) (string, []v1.PodIP) {
	var ips []string
	if pod.Spec.HostNetwork {
		ips = in.NodeIPs
	} else if sb := in.Observed.LatestSandbox(); sb != nil {
		ips = sb.IPs
	}
	if len(ips) == 0 {
		return pod.Status.PodIP, pod.Status.PodIPs
	}
	out := make([]v1.PodIP, 0, len(ips))
	for _, ip := range ips {
		out = append(out, v1.PodIP{IP: ip})
	}
	return ips[0], out
}

// containerKind is the list of the pod's spec a container comes from.
type containerKind int

const (
	appKind containerKind = iota
	initKind
	ephemeralKind
)

func containerStatus(c *v1.Container, kind containerKind, defaultWaiting string, in Input) v1.ContainerStatus {
	init := kind == initKind
	cs := v1.ContainerStatus{Name: c.Name, Image: c.Image,
		State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: defaultWaiting}}}
	if kind != ephemeralKind {
		// The kubelet's prober writes started for every init and app
		// container, false until it runs (and passes its startup probe).
		cs.Started = new(bool)
	}
	var seen []*runtime.ContainerStatus
	for _, o := range in.Observed.ContainersNamed(c.Name) {
		if o.Init == init && o.Ephemeral == (kind == ephemeralKind) {
			seen = append(seen, o)
		}
	}
	if len(seen) > 0 {
		latest := seen[0]
		cs.ContainerID = in.RuntimeName + "://" + latest.ID
		cs.ImageID = latest.ImageRef
		if latest.Image != "" {
			cs.Image = latest.Image
		}
		cs.RestartCount = latest.RestartCount
		cs.State = containerState(latest, in.RuntimeName)
		if u := latest.User; u != nil {
			cs.User = &v1.ContainerUser{Linux: &v1.LinuxContainerUser{UID: u.UID, GID: u.GID, SupplementalGroups: u.SupplementalGroups}}
		}
		cs.LastTerminationState = lastTermination(seen[1:], in.RuntimeName)
		switch {
		case kind == ephemeralKind:
			// Neither started nor ready: the kubelet's prober never
			// looks at ephemeral containers.
		case cs.State.Running != nil:
			var pr ProbeResults
			if in.Probes != nil {
				pr = in.Probes(latest.ID)
			}
			started := c.StartupProbe == nil || pr.Started
			cs.Started = &started
			cs.Ready = (!init || IsSidecar(c)) && started && (c.ReadinessProbe == nil || pr.Ready)
		}
		// A sidecar is ready only while it runs, even once it has exited 0.
		if init && !IsSidecar(c) && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0 {
			cs.Ready = true
		}
	}
	if w, ok := in.Waiting[c.Name]; ok && cs.State.Running == nil && !in.Terminal {
		if cs.State.Terminated != nil {
			cs.LastTerminationState = cs.State
		}
		cs.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}}
	}
	return cs
}

// lastTermination is how the container before the latest ended, from
// older, newest first. Containers created and never started are passed
// over (one a killed agent left behind, or whose start failed), and only a
// container that ran and ended counts: the kubelet would show such a
// leftover as a last state waiting in ContainerCreating, which no
// container ever ended in.
func lastTermination(older []*runtime.ContainerStatus, runtimeName string) v1.ContainerState {
	for _, o := range older {
		if o.State == runtime.ContainerCreated {
			continue
		}
		if o.State == runtime.ContainerExited || o.State == runtime.ContainerUnknown {
			return containerState(o, runtimeName)
		}
		break
	}
	return v1.ContainerState{}
}

// unknownTerminated is the state of a container that never ended as far as the
// agent knows, in a pod that has: the kubelet reports it as a failure.
var unknownTerminated = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
	ExitCode: 137, Reason: "ContainerStatusUnknown",
	Message: "The container could not be located when the pod was terminated",
}}

// markUnknown gives an ended pod's containers that show no end the kubelet's
// ContainerStatusUnknown: the app containers once the pod has initialized (never
// before: an app container of a pod whose init container failed stays waiting in
// PodInitializing), and the init containers up to the last one that ever started.
func markUnknown(pod *v1.Pod, st *v1.PodStatus) {
	if initialized(pod, st) {
		for i := range st.ContainerStatuses {
			if st.ContainerStatuses[i].State.Terminated == nil {
				st.ContainerStatuses[i].State = *unknownTerminated.DeepCopy()
			}
		}
	}
	inits := st.InitContainerStatuses
	last := 0
	for i := len(inits) - 1; i >= 0; i-- {
		if inits[i].State.Waiting == nil || inits[i].LastTerminationState.Terminated != nil {
			last = i
			break
		}
	}
	for i := 0; i < len(inits) && i <= last; i++ {
		if inits[i].State.Terminated == nil {
			inits[i].State = *unknownTerminated.DeepCopy()
		}
	}
}

// initialized reports whether a pod ever got past its init containers: it has
// none, an app container left waiting once, or the last init container succeeded
// (a sidecar: started).
func initialized(pod *v1.Pod, st *v1.PodStatus) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, cs := range st.ContainerStatuses {
		if cs.LastTerminationState.Terminated != nil || cs.State.Waiting == nil {
			return true
		}
	}
	n := len(st.InitContainerStatuses)
	if n == 0 || n != len(pod.Spec.InitContainers) {
		return false
	}
	last := st.InitContainerStatuses[n-1]
	if IsSidecar(&pod.Spec.InitContainers[n-1]) {
		return last.State.Running != nil && last.Started != nil && *last.Started
	}
	for _, t := range []*v1.ContainerStateTerminated{last.LastTerminationState.Terminated, last.State.Terminated} {
		if t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

func containerState(o *runtime.ContainerStatus, runtimeName string) v1.ContainerState {
	switch o.State {
	case runtime.ContainerRunning:
		return v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(o.StartedAt)}}
	case runtime.ContainerExited, runtime.ContainerUnknown:
		reason := o.Reason
		if reason == "" {
			reason = "Error"
			if o.ExitCode == 0 {
				reason = "Completed"
			}
		}
		if o.State == runtime.ContainerUnknown {
			reason = "ContainerStatusUnknown"
		}
		msg := o.Message
		if o.TerminationMessage != "" {
			if msg != "" {
				msg += ": "
			}
			msg += o.TerminationMessage
		}
		return v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			ExitCode: o.ExitCode, Reason: reason, Message: msg,
			StartedAt: timeOrZero(o.StartedAt), FinishedAt: timeOrZero(o.FinishedAt),
			ContainerID: runtimeName + "://" + o.ID,
		}}
	default:
		return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: ReasonContainerCreating}}
	}
}

func timeOrZero(t time.Time) metav1.Time {
	if t.IsZero() {
		return metav1.Time{}
	}
	return metav1.NewTime(t)
}

// conditions computes the conditions the agent owns, in the kubelet's
// order; the manager keeps the others (DisruptionTarget, readiness gates,
// …) from the apiserver.
func conditions(pod *v1.Pod, st *v1.PodStatus, in Input) []v1.PodCondition {
	// At the precision the apiserver keeps: the next pass reads the time back from the
	// pod and computes the same status, which is then not new to the status manager.
	now := metav1.NewTime(in.Now).Rfc3339Copy()
	mk := func(t v1.PodConditionType, ok bool, reason, msg string) v1.PodCondition {
		c := v1.PodCondition{Type: t, Status: v1.ConditionFalse, Reason: reason, Message: msg,
			LastTransitionTime: now, ObservedGeneration: pod.Generation}
		if ok {
			c.Status, c.Reason, c.Message = v1.ConditionTrue, "", ""
		}
		for _, oc := range pod.Status.Conditions {
			if oc.Type == t && oc.Status == c.Status {
				c.LastTransitionTime = oc.LastTransitionTime
			}
		}
		return c
	}
	sb := in.Observed.LatestSandbox()
	sandboxReady := sb != nil && sb.Ready && !in.Terminal
	var notInit, notReady []string
	for i, cs := range st.InitContainerStatuses {
		if IsSidecar(&pod.Spec.InitContainers[i]) {
			// A sidecar has done its part of initialization once started.
			if (cs.Started == nil || !*cs.Started) && cs.LastTerminationState.Terminated == nil && cs.State.Terminated == nil {
				notInit = append(notInit, cs.Name)
			}
			if !cs.Ready {
				notReady = append(notReady, cs.Name)
			}
			continue
		}
		if t := cs.State.Terminated; t == nil || t.ExitCode != 0 {
			notInit = append(notInit, cs.Name)
		}
	}
	for _, cs := range st.ContainerStatuses {
		if !cs.Ready {
			notReady = append(notReady, cs.Name)
		}
	}
	initReason, initMsg := "", ""
	if len(notInit) > 0 {
		initReason = ReasonContainersNotInitialized
		initMsg = fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(notInit, " "))
	}
	readyReason, readyMsg := "", ""
	if len(notReady) > 0 {
		readyReason = ReasonContainersNotReady
		readyMsg = fmt.Sprintf("containers with unready status: [%s]", strings.Join(notReady, " "))
	}
	if st.Phase == v1.PodSucceeded {
		readyReason, readyMsg = ReasonPodCompleted, ""
		if len(notInit) > 0 {
			initReason, initMsg = ReasonPodCompleted, ""
		}
	}
	podReady, podReason, podMsg := len(notReady) == 0, readyReason, readyMsg
	if podReady {
		if msgs := unreadyGates(pod); len(msgs) > 0 {
			podReady, podReason, podMsg = false, ReasonReadinessGatesNotReady, strings.Join(msgs, ", ")
		}
	}
	return []v1.PodCondition{
		mk(v1.PodReadyToStartContainers, sandboxReady, "", ""),
		mk(v1.PodInitialized, len(notInit) == 0, initReason, initMsg),
		mk(v1.PodReady, podReady, podReason, podMsg),
		mk(v1.ContainersReady, len(notReady) == 0, readyReason, readyMsg),
		// Running here, the pod is scheduled, however it was bound.
		mk(v1.PodScheduled, true, "", ""),
	}
}

// unreadyGates lists, in the kubelet's words, the pod's readiness gates
// whose condition (written by someone else) is missing or not True.
func unreadyGates(pod *v1.Pod) []string {
	var msgs []string
	for _, g := range pod.Spec.ReadinessGates {
		var found *v1.PodCondition
		for i := range pod.Status.Conditions {
			if pod.Status.Conditions[i].Type == g.ConditionType {
				found = &pod.Status.Conditions[i]
			}
		}
		switch {
		case found == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(g.ConditionType)))
		case found.Status != v1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(g.ConditionType), found.Status))
		}
	}
	return msgs
}
