// Package sync runs pods. The Dispatcher admits each new pod and gives it
// one worker goroutine; the worker asks decide (decide.go), a pure
// function of the pod's state, its spec, what the runtime shows and the
// time, for the next step of the pod's life, carries the step out, and
// advances the state with the outcome. computePodActions, below, plans
// what a running pod needs started and killed.
package sync

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/probe"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// podActions is what one sync of a pod has to do, in order.
type podActions struct {
	// KillPod stops every container and sandbox before anything else: the
	// sandbox is gone or broken and a new one replaces it.
	KillPod bool
	// SandboxesToStop are ready sandboxes beside the pod's own that hold
	// nothing (duplicateSandboxes): stopped, and collected later.
	SandboxesToStop []string
	// CreateSandbox asks for a new sandbox with SandboxAttempt.
	CreateSandbox  bool
	SandboxAttempt uint32
	// SandboxID is the ready sandbox containers are started in.
	SandboxID string
	// NextInit is the index of the init container to start, or -1.
	NextInit int
	// ContainersToStart are indexes into spec.containers.
	ContainersToStart []int
	// ContainersToKill are running containers whose spec changed; each is
	// also in ContainersToStart, to be replaced.
	ContainersToKill []string
	// ContainersToRemove are containers created but never started, which
	// the ones started now replace. Dead containers past those worth
	// keeping are pkg/gc's to remove, with their log files.
	ContainersToRemove []string
	// ContainersToStartExisting are containers (by ID) of any kind that an
	// agent killed between create and start left created: each is started
	// as it is, in place of a new one (see leftover).
	ContainersToStartExisting []string
	// SidecarsToStart are indexes into spec.initContainers of sidecars
	// (restartable init containers) that ran and stopped: they are
	// started again whatever the pod's restart policy.
	SidecarsToStart []int
	// EphemeralToStart are indexes into spec.ephemeralContainers of those
	// never started: each runs once, in the current sandbox, and is never
	// started again, even in a new sandbox.
	EphemeralToStart []int
	// ProbeKills are running containers that failed their liveness or
	// startup probe.
	ProbeKills []probeKill
	// ContainersToResize are running containers to bring to their
	// allocated resources in place; ResizeRestarts are running containers
	// whose resize policy asks for a restart instead (app containers among
	// them are in ContainersToStart too). See planResizes.
	ContainersToResize []containerResize
	ResizeRestarts     []string
	// Done is set when nothing will run again: every container has ended
	// for good under its own restart rules and policy (or the pod's), or
	// an init container failed and is not to be restarted. The pod is
	// then stopped and its status final.
	Done bool
}

// createsAnything says whether the plan creates a sandbox or a container.
func (a *podActions) createsAnything() bool {
	return a.CreateSandbox || a.NextInit >= 0 || len(a.ContainersToStart) > 0 ||
		len(a.SidecarsToStart) > 0 || len(a.EphemeralToStart) > 0
}

// computePodActions decides what to do with a pod given what the runtime
// shows of it, what the probes say of its running containers, and which
// containers this agent failed to start (by ID; see leftover). It is
// pure: the same inputs always yield the same plan.
func computePodActions(pod *v1.Pod, observed *runtime.PodStatus, probes probeResults, failedStarts map[string]bool) podActions {
	a := podActions{NextInit: -1}
	sb := observed.LatestSandbox()
	extra, ok := duplicateSandboxes(observed, sb)
	sandboxOK := sb != nil && sb.Ready && ok
	if sandboxOK {
		a.SandboxesToStop = extra
	}
	if !sandboxOK {
		if sb != nil {
			a.SandboxAttempt = sb.Attempt + 1
		}
		// A pod that never restarts does not get a second sandbox once
		// its containers have run: it is over, whatever the containers'
		// own restart policies say (as for the kubelet).
		if pod.Spec.RestartPolicy == v1.RestartPolicyNever && sb != nil && len(observed.Containers) > 0 {
			a.KillPod, a.Done = true, true
			return a
		}
		a.KillPod = sb != nil || len(observed.Containers) > 0
		a.CreateSandbox = true
		if len(pod.Spec.InitContainers) > 0 {
			a.NextInit = 0
			return a
		}
		for i := range pod.Spec.Containers {
			if !succeededOnFailure(pod, observed, &pod.Spec.Containers[i]) {
				a.ContainersToStart = append(a.ContainersToStart, i)
			}
		}
		return a
	}
	a.SandboxID = sb.ID

	ia := initActions(pod, observed, sb.ID, probes, failedStarts)
	if ia.failed {
		a.KillPod, a.Done = true, true
		return a
	}
	a.SidecarsToStart, a.ProbeKills, a.ContainersToKill = ia.sidecars, ia.kills, ia.changed
	a.ContainersToRemove = append(a.ContainersToRemove, ia.stale...)
	// Ephemeral containers are for debugging: they start whether or not
	// the pod has initialized, and they never keep it running.
	var ephemeralLeft []string
	a.EphemeralToStart, ephemeralLeft = ephemeralToStart(pod, observed, sb.ID, failedStarts)
	a.ContainersToStartExisting = append(append([]string(nil), ephemeralLeft...), ia.existing...)
	if !ia.done {
		a.NextInit = ia.next
		return a
	}

	anyRunning, anyToStart := false, false
	for i := range pod.Spec.Containers {
		c := latestIn(observed, pod.Spec.Containers[i].Name, false, sb.ID)
		switch {
		case c == nil:
			anyToStart = true
			a.ContainersToStart = append(a.ContainersToStart, i)
		case c.State == runtime.ContainerRunning && c.Hash != "" && c.Hash != runtime.ContainerHash(&pod.Spec.Containers[i]):
			anyRunning = true
			a.ContainersToKill = append(a.ContainersToKill, c.ID)
			a.ContainersToStart = append(a.ContainersToStart, i)
		case c.State == runtime.ContainerRunning:
			anyRunning = true
			if k, failed := failedProbe(pod, &pod.Spec.Containers[i], c, false, probes); failed {
				a.ProbeKills = append(a.ProbeKills, k)
			}
		case leftover(c, &pod.Spec.Containers[i], failedStarts):
			anyToStart = true
			a.ContainersToStartExisting = append(a.ContainersToStartExisting, c.ID)
		case shouldRestart(pod, &pod.Spec.Containers[i], c):
			anyToStart = true
			a.ContainersToStart = append(a.ContainersToStart, i)
			if c.State == runtime.ContainerCreated {
				// Never started, and not to be (a failed start, or made
				// from an older spec): its successor replaces it.
				a.ContainersToRemove = append(a.ContainersToRemove, c.ID)
			}
		}
	}
	if !anyRunning && !anyToStart {
		// Running ephemeral containers do not keep the pod: they stop
		// with it, and none starts in it any more.
		a.Done, a.KillPod, a.EphemeralToStart, a.ContainersToStartExisting = true, true, nil, ia.existing
	}
	return a
}

// leftover says whether c, the newest container of spec in the pod's
// current sandbox, is one that an agent killed between create and start
// left behind, to be started as it is rather than replaced: it never
// started, it was made from the spec as it is now, and this agent has
// not already failed to start it. Its inputs (environment, mounts, the
// restart count on its annotations) were settled when it was made, as
// they would have been had the start followed at once.
func leftover(c *runtime.ContainerStatus, spec *v1.Container, failedStarts map[string]bool) bool {
	return c.State == runtime.ContainerCreated && c.StartedAt.IsZero() &&
		c.Hash != "" && c.Hash == runtime.ContainerHash(spec) && !failedStarts[c.ID]
}

// ephemeralToStart lists the ephemeral containers that never ran: one that
// exists in the runtime, in whatever state, has had its one run, unless
// it is a leftover in the current sandbox, returned by ID to be started.
func ephemeralToStart(pod *v1.Pod, observed *runtime.PodStatus, sandboxID string, failedStarts map[string]bool) ([]int, []string) {
	var start []int
	var existing []string
	for i := range pod.Spec.EphemeralContainers {
		spec := (*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		seen := observed.ContainersNamed(spec.Name)
		switch {
		case len(seen) == 0:
			start = append(start, i)
		case seen[0].Ephemeral && seen[0].SandboxID == sandboxID && leftover(seen[0], spec, failedStarts):
			existing = append(existing, seen[0].ID)
		}
	}
	return start, existing
}

// initPlan is what the init containers call for.
type initPlan struct {
	// next is the init container to start for the first time, or -1.
	next int
	// sidecars are sidecars to start again; kills failed their probes;
	// changed are running sidecars whose spec changed, to be replaced.
	sidecars []int
	kills    []probeKill
	changed  []string
	// stale are init containers created but never started, replaced by
	// the one that starts next; existing are leftovers to start instead.
	stale, existing []string
	// done: every init container has done its part (regular ones
	// succeeded, sidecars started); failed: one failed for good
	// (restartPolicy Never).
	done, failed bool
}

// initActions walks the init containers in order in the current sandbox.
// A regular one must succeed before the next starts; a sidecar must have
// started (and passed its startup probe, if it has one), and is then kept
// running beside what follows: started again when it stops, killed when a
// probe fails. Once something later has started, an init container's
// part is done for good, and only sidecars still need care.
func initActions(pod *v1.Pod, observed *runtime.PodStatus, sandboxID string, probes probeResults, failedStarts map[string]bool) initPlan {
	p := initPlan{next: -1}
	inits := pod.Spec.InitContainers
	// startedAfter[i]: some init container after i, or an app container,
	// exists in this sandbox.
	startedAfter := make([]bool, len(inits))
	later := false
	for i := range pod.Spec.Containers {
		later = later || latestIn(observed, pod.Spec.Containers[i].Name, false, sandboxID) != nil
	}
	for i := len(inits) - 1; i >= 0; i-- {
		startedAfter[i] = later
		later = later || latestIn(observed, inits[i].Name, true, sandboxID) != nil
	}
	for i := range inits {
		spec := &inits[i]
		c := latestIn(observed, spec.Name, true, sandboxID)
		if !status.IsSidecar(spec) {
			if startedAfter[i] {
				continue
			}
			switch {
			case c == nil:
				p.next = i
				return p
			case c.State == runtime.ContainerRunning:
				return p
			case c.State == runtime.ContainerExited && c.ExitCode == 0:
				continue
			case c.State == runtime.ContainerExited && !status.RestartsOnExit(pod, spec, c.ExitCode):
				// Its rules, its own policy or the pod's say it is
				// not run again: initialization has failed for good.
				p.failed = true
				return p
			case leftover(c, spec, failedStarts):
				p.existing = append(p.existing, c.ID)
				return p
			default:
				p.next = i
				if c.State == runtime.ContainerCreated {
					p.stale = append(p.stale, c.ID)
				}
				return p
			}
		}
		switch {
		case c == nil:
			p.next = i
			return p
		case c.State == runtime.ContainerRunning:
			if c.Hash != "" && c.Hash != runtime.ContainerHash(spec) {
				p.changed = append(p.changed, c.ID)
			} else if k, failed := failedProbe(pod, spec, c, true, probes); failed {
				p.kills = append(p.kills, k)
			}
			if spec.StartupProbe != nil && probes[c.ID].Startup != probe.Success && !startedAfter[i] {
				// Not started until its startup probe says so.
				return p
			}
		case leftover(c, spec, failedStarts):
			p.existing = append(p.existing, c.ID)
			if !startedAfter[i] {
				return p
			}
		default:
			p.sidecars = append(p.sidecars, i)
			if c.State == runtime.ContainerCreated {
				p.stale = append(p.stale, c.ID)
			}
			if !startedAfter[i] {
				return p
			}
		}
	}
	p.done = true
	return p
}

// shouldRestart says whether c, the newest app container of spec, not
// running, is to be started again: an exited one as its restart rules,
// its own restart policy or the pod's decide (status.RestartsOnExit).
func shouldRestart(pod *v1.Pod, spec *v1.Container, c *runtime.ContainerStatus) bool {
	if c.State == runtime.ContainerCreated || c.State == runtime.ContainerUnknown {
		// It never ran (a failed start) or the runtime lost track: retry,
		// unless it never restarts and it did run. With no exit code, no
		// rule can match: only the policies count, as for the kubelet's
		// probe kills and init containers in an unknown state.
		return restartPolicy(pod, spec) != v1.RestartPolicyNever || c.StartedAt.IsZero()
	}
	return status.RestartsOnExit(pod, spec, c.ExitCode)
}

// succeededOnFailure: a container restarted only on failure (its own
// restartPolicy OnFailure, or the pod's when it has none) that already
// succeeded is not run again in a new sandbox. Any other is: the pod's
// restart policy, not the container's, decides whether a new sandbox is
// made at all.
func succeededOnFailure(pod *v1.Pod, observed *runtime.PodStatus, spec *v1.Container) bool {
	if restartPolicy(pod, spec) != v1.RestartPolicyOnFailure {
		return false
	}
	c := latestOf(observed, spec.Name, false)
	return c != nil && c.State == runtime.ContainerExited && c.ExitCode == 0
}

// restartPolicy is the policy a container restarts under when no exit
// code is there to match its rules against: its own when it has one,
// else the pod's.
func restartPolicy(pod *v1.Pod, c *v1.Container) v1.RestartPolicy {
	if c.RestartPolicy != nil {
		return v1.RestartPolicy(*c.RestartPolicy)
	}
	return pod.Spec.RestartPolicy
}

// duplicateSandboxes returns the ready sandboxes beside current (the
// pod's, runtime.PodStatus.LatestSandbox) that hold no live container, to
// be stopped: what a RunPodSandbox that timed out and then completed in
// the runtime leaves, or one made by an agent killed before it saw the
// answer. ok is false when another ready sandbox holds live containers
// too: which one the pod lives in cannot be told, and the pod starts again
// in a new sandbox, as the kubelet does with more than one ready sandbox.
func duplicateSandboxes(observed *runtime.PodStatus, current *runtime.SandboxStatus) (extra []string, ok bool) {
	if current == nil || len(observed.Sandboxes) < 2 {
		return nil, true
	}
	live := map[string]bool{}
	for _, c := range observed.Containers {
		if c.State == runtime.ContainerRunning || c.State == runtime.ContainerCreated {
			live[c.SandboxID] = true
		}
	}
	for _, sb := range observed.Sandboxes {
		if !sb.Ready || sb.ID == current.ID {
			continue
		}
		if live[sb.ID] {
			return nil, false
		}
		extra = append(extra, sb.ID)
	}
	return extra, true
}

// latestOf is the newest container of a name and kind in any sandbox.
func latestOf(observed *runtime.PodStatus, name string, init bool) *runtime.ContainerStatus {
	for _, c := range observed.ContainersNamed(name) {
		if c.Init == init {
			return c
		}
	}
	return nil
}

// latestIn is the newest container of a name and kind in one sandbox.
func latestIn(observed *runtime.PodStatus, name string, init bool, sandboxID string) *runtime.ContainerStatus {
	for _, c := range observed.ContainersNamed(name) {
		if c.Init == init && c.SandboxID == sandboxID {
			return c
		}
	}
	return nil
}
