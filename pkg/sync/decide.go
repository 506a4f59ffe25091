package sync

import (
	"fmt"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/allocation"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// A pod's life on this node is one state machine, in the manner of etcd
// raft's Ready/Advance: decide looks at the worker's state and what it
// knows now (the desired pod, the runtime's view, the probes, the time)
// and returns the next step; the worker carries the step out and hands
// the outcome to advance, which returns the next state. decide and
// advance do no I/O and read no clock, so every decision about a pod can
// be replayed from a script (testdata/*.txt).

// phase is where a pod is in its life on this node.
type phase int

const (
	// phaseSyncing: the pod should run; containers are started as needed.
	phaseSyncing phase = iota
	// phaseTerminating: the pod is ending (state.end says why) and its
	// containers and sandboxes are being stopped.
	phaseTerminating
	// phaseTerminated: nothing of the pod runs; its containers stay for
	// their logs and final status until the pod is deleted.
	phaseTerminated
	// phaseCleaned: nothing of the pod is left in the runtime or on disk.
	phaseCleaned
)

func (p phase) String() string {
	return [...]string{"syncing", "terminating", "terminated", "cleaned"}[p]
}

// ending is why a pod stopped running, and what that makes of its final
// status.
type ending struct {
	// reason and message override the final status's (which is then
	// Failed), as for DeadlineExceeded or an admission's refusal.
	reason, message string
	// event: a Warning event with reason and message marks the end.
	event bool
	// condition, when set, is put in the final status (an eviction's
	// DisruptionTarget). Shared, never modified.
	condition *v1.PodCondition
	// rejected: admission refused the pod; nothing of it ever ran and its
	// final status is the bare refusal.
	rejected bool
	// quiet: no final status is written unless the pod is deleted: it
	// left the source, or the apiserver already shows it ended.
	quiet bool
}

// podState is all a worker carries from one pass to the next. Only
// advance makes a new one.
type podState struct {
	phase phase
	end   ending
	// restarts and pulls are the crash-loop and image-pull back-offs.
	restarts, pulls backoffs
	// sandboxRetry: the pod's sandbox failed to be created; no new one
	// is tried before this time.
	sandboxRetry time.Time
	// waiting is why each container not running waits, as last decided
	// or met (CrashLoopBackOff, ErrImagePull, CreateContainerConfigError…).
	waiting map[string]status.Waiting
	// final is the pod's final status once computed; finalWritten says it
	// went to the status manager, confirmed that the deletion of the pod
	// object was asked for.
	final                   *v1.PodStatus
	finalWritten, confirmed bool
	// released: the volumes and cgroup of the ended pod are gone.
	released bool
	// failedStarts are the containers (by ID) whose start failed under
	// this agent: a container left created is then replaced, not taken
	// for the leftover of an agent killed before it could start it.
	failedStarts map[string]bool
}

// input is what decide knows of the pod now.
type input struct {
	pod *v1.Pod
	// removed: the pod left the source (deleted from the apiserver, or
	// never known there: an orphan in the runtime).
	removed  bool
	observed *runtime.PodStatus
	// abandoned are containers left out of observed whose start died with
	// an earlier agent (withoutAbandonedStarts), to be removed.
	abandoned []string
	probes    probeResults
	// actuated are the resources last applied to each of the pod's
	// containers, by name (in-place resize).
	actuated allocation.Containers
	now      time.Time
	// resync is how long a pod with nothing to do waits before the next
	// look; maxRestartBackoff caps the crash-loop back-off.
	resync, maxRestartBackoff time.Duration
	// evict is the eviction asked of the pod, if any.
	evict *eviction
}

// stepKind is what the worker is to do next.
type stepKind int

const (
	// stepSync: carry out plan on the running pod.
	stepSync stepKind = iota
	// stepStop: stop every container and sandbox within grace.
	stepStop
	// stepFinal: compute the final status from what the runtime shows;
	// write it now when write is set, else keep it for the deletion.
	stepFinal
	// stepCleanup: remove containers, sandboxes, cgroup, volumes, the
	// pod directory and logs.
	stepCleanup
	// stepRelease: tear down the volumes and cgroup of an ended pod.
	stepRelease
	// stepConfirm: write the final status of the deleted pod, which
	// confirms its deletion to the apiserver.
	stepConfirm
	// stepIdle: nothing to do until wait has passed or something changes.
	stepIdle
	// stepDone: the worker is finished.
	stepDone
)

func (k stepKind) String() string {
	return [...]string{"sync", "stop", "final", "cleanup", "release", "confirm", "idle", "done"}[k]
}

// step is one thing decide asks the worker to do.
type step struct {
	kind stepKind
	// plan is what a sync step starts and kills.
	plan podActions
	// holds are containers whose restart back-off holds them back this
	// time; restarts are the restart back-offs once the restarts of this
	// step are counted; pullsHeld are the images whose pull waits out its
	// back-off, with how long.
	holds     []hold
	restarts  backoffs
	pullsHeld map[string]time.Duration
	// begin is set on the stop step that ends a running pod: why it ends.
	begin *ending
	// grace is the stop step's grace period, in seconds.
	grace int64
	// write: the final step writes the status at once.
	write bool
	// wait is when to look again at the latest, whatever happens.
	wait time.Duration
}

// hold is a container that would start but waits out its restart back-off.
type hold struct {
	name    string
	init    bool
	waiting status.Waiting
}

// outcome is what carrying a step out came to.
type outcome struct {
	// err: the step failed and is tried again.
	err error
	// waiting: how the sync step changed containers' waiting reasons (nil
	// clears one: the container started).
	waiting map[string]*status.Waiting
	// pullsFailed and pullsDone are the image pulls (back-off keys) that
	// failed and succeeded.
	pullsFailed, pullsDone []string
	// sandboxFailed: the sandbox the plan asked for could not be made.
	sandboxFailed bool
	// final is the status the final step computed.
	final *v1.PodStatus
	// next is when the sync step wants to look again (a failed start).
	next time.Duration
	// resizeErr stopped the in-place resize of a container.
	resizeErr error
	// startsFailed are the containers (by ID) that were created, or
	// found created, and then failed to start.
	startsFailed []string
	// observed is the runtime as the sync step knows it to have left it,
	// when it knows better than the observation it began with (the
	// sandbox it made: see sandboxReady); nil otherwise.
	observed *runtime.PodStatus
}

// decide returns the next step for the pod. It is pure.
func decide(st *podState, in input) step {
	pod := in.pod
	deleting := in.removed || pod.DeletionTimestamp != nil
	idle := step{kind: stepIdle, wait: in.resync}
	switch st.phase {
	case phaseSyncing:
		if e, ok := endOf(in); ok {
			return step{kind: stepStop, begin: &e, grace: stopGrace(pod, in.evict)}
		}
		return syncStep(st, in)
	case phaseTerminating:
		return step{kind: stepStop, grace: stopGrace(pod, in.evict)}
	case phaseTerminated:
		switch {
		case in.removed:
			return step{kind: stepCleanup}
		case st.final == nil && (deleting || !st.end.quiet):
			return step{kind: stepFinal, write: !deleting}
		case deleting:
			return step{kind: stepCleanup}
		case !st.released && !hasRunning(in.observed):
			return step{kind: stepRelease}
		}
		return idle
	case phaseCleaned:
		switch {
		case in.removed:
			return step{kind: stepDone}
		case pod.DeletionTimestamp != nil && !st.confirmed:
			return step{kind: stepConfirm}
		}
	}
	return idle
}

// endOf says whether a running pod ends now, other than by its restart
// policy, and why.
func endOf(in input) (ending, bool) {
	pod := in.pod
	switch {
	case in.removed:
		return ending{quiet: true}, true
	case pod.DeletionTimestamp != nil:
		return ending{}, true
	case isTerminal(pod.Status.Phase):
		// An earlier run of the agent ended it and said so.
		return ending{quiet: true}, true
	case in.evict != nil:
		return endOfEviction(in.evict), true
	}
	if left, ok := deadlineLeft(pod, in.now); ok && left <= 0 {
		return ending{reason: reasonDeadlineExceeded, message: messageDeadlineExceeded, event: true}, true
	}
	return ending{}, false
}

// deadlineLeft is how long the pod may still run under its
// activeDeadlineSeconds, counted from its start time.
func deadlineLeft(pod *v1.Pod, now time.Time) (time.Duration, bool) {
	d := pod.Spec.ActiveDeadlineSeconds
	if d == nil || pod.Status.StartTime == nil {
		return 0, false
	}
	return pod.Status.StartTime.Add(time.Duration(*d) * time.Second).Sub(now), true
}

// Reason and message of a pod failed for running past activeDeadlineSeconds,
// as the kubelet words them.
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// syncStep plans a pass of a running pod: what computePodActions says,
// less the containers their restart back-off holds back.
func syncStep(st *podState, in input) step {
	pod := in.pod
	plan := computePodActions(pod, in.observed, in.probes, st.failedStarts)
	plan.ContainersToRemove = append(plan.ContainersToRemove, in.abandoned...)
	if plan.Done {
		return step{kind: stepStop, begin: &ending{}, grace: gracePeriod(pod)}
	}
	if left := st.sandboxRetry.Sub(in.now); plan.CreateSandbox && left > 0 {
		// As the kubelet after a failed sync: a pod whose sandbox could not
		// be made (no such RuntimeClass, a runtime handler or network the
		// runtime refuses) waits out the back-off instead of retrying at once.
		if d, ok := deadlineLeft(pod, in.now); ok {
			left = min(left, max(d, 100*time.Millisecond))
		}
		return step{kind: stepIdle, wait: left}
	}
	planResizes(pod, in.observed, &plan, in.actuated)
	s := step{kind: stepSync, plan: plan, restarts: st.restarts, wait: in.resync}
	keep := func(c *v1.Container, init bool) bool {
		w, h, ok := s.restartBackoff(pod, c, init, in)
		if !ok {
			s.holds = append(s.holds, h)
			s.wait = min(s.wait, w)
		}
		return ok
	}
	if i := plan.NextInit; i >= 0 && !keep(&pod.Spec.InitContainers[i], true) {
		s.plan.NextInit = -1
	}
	s.plan.SidecarsToStart = filter(plan.SidecarsToStart, func(i int) bool { return keep(&pod.Spec.InitContainers[i], true) })
	s.plan.ContainersToStart = filter(plan.ContainersToStart, func(i int) bool { return keep(&pod.Spec.Containers[i], false) })
	s.pullsHeld = pullsHeld(st.pulls, pod, in.now)
	if left, ok := deadlineLeft(pod, in.now); ok {
		s.wait = min(s.wait, max(left, 100*time.Millisecond))
	}
	return s
}

// restartBackoff decides whether a container that ran before may start
// again now: if its back-off has passed, the restart is counted in
// s.restarts; if not, it returns how long it waits and what it shows.
func (s *step) restartBackoff(pod *v1.Pod, c *v1.Container, init bool, in input) (time.Duration, hold, bool) {
	prev := latestOf(in.observed, c.Name, init)
	if prev == nil || prev.State != runtime.ContainerExited {
		return 0, hold{}, true
	}
	key := restartKey(pod, c.Name)
	ran := prev.FinishedAt.Sub(prev.StartedAt)
	if wait := s.restarts.remaining(key, prev.FinishedAt, ran, in.now); wait > 0 {
		msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", s.restarts.delay(key), c.Name, podDesc(pod))
		return wait, hold{name: c.Name, init: init, waiting: status.Waiting{Reason: reasonCrashLoop, Message: msg}}, false
	}
	s.restarts = s.restarts.next(key, in.now, in.maxRestartBackoff, ran >= backoffResetAfter)
	return 0, hold{}, true
}

// restartKey is a container's key in the restart back-offs.
func restartKey(pod *v1.Pod, name string) string { return string(pod.UID) + "/" + name }

// pullKey is an image's key in the pull back-offs.
func pullKey(image string) string { return "image/" + image }

// pullsHeld lists the pod's images whose last pull failed recently
// enough that a new pull must wait, with how long.
func pullsHeld(pulls backoffs, pod *v1.Pod, now time.Time) map[string]time.Duration {
	if len(pulls) == 0 {
		return nil
	}
	out := map[string]time.Duration{}
	add := func(image string) {
		if w := pulls.pullRemaining(pullKey(image), now); w > 0 {
			out[image] = w
		}
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			add(list[i].Image)
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		add(pod.Spec.EphemeralContainers[i].Image)
	}
	for _, vol := range pod.Spec.Volumes {
		if vol.Image != nil {
			add(vol.Image.Reference)
		}
	}
	return out
}

func filter(xs []int, keep func(int) bool) []int {
	var out []int
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// advance returns the state after step s was carried out with outcome o,
// at now. It is pure.
func advance(st podState, s step, o outcome, now time.Time) podState {
	switch s.kind {
	case stepSync:
		st.restarts = s.restarts
		st.waiting = maps.Clone(st.waiting)
		if st.waiting == nil {
			st.waiting = map[string]status.Waiting{}
		}
		for _, h := range s.holds {
			st.waiting[h.name] = h.waiting
		}
		for name, w := range o.waiting {
			if w == nil {
				delete(st.waiting, name)
			} else {
				st.waiting[name] = *w
			}
		}
		for _, key := range o.pullsFailed {
			st.pulls = st.pulls.next(key, now, 0, false)
		}
		for _, key := range o.pullsDone {
			st.pulls = st.pulls.without(key)
		}
		if o.sandboxFailed {
			st.sandboxRetry = now.Add(sandboxBackoff)
		}
		st.failedStarts = nextFailedStarts(st.failedStarts, s.plan.ContainersToRemove, o.startsFailed)
	case stepStop:
		if s.begin != nil {
			st.phase, st.end = phaseTerminating, *s.begin
		}
		if o.err == nil && st.phase == phaseTerminating {
			st.phase = phaseTerminated
		}
	case stepFinal:
		if o.err == nil {
			st.final, st.finalWritten = o.final, s.write
		}
	case stepCleanup:
		if o.err == nil {
			st.phase, st.released = phaseCleaned, true
		}
	case stepRelease:
		st.released = o.err == nil
	case stepConfirm:
		st.confirmed = true
	}
	return st
}

// nextFailedStarts adds the containers that failed to start to failed,
// less those removed: the set lasts as long as the containers it names.
func nextFailedStarts(failed map[string]bool, removed, startsFailed []string) map[string]bool {
	if len(startsFailed) == 0 && len(failed) == 0 {
		return failed
	}
	out := maps.Clone(failed)
	if out == nil {
		out = map[string]bool{}
	}
	for _, id := range removed {
		delete(out, id)
	}
	for _, id := range startsFailed {
		out[id] = true
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func isTerminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

// hasRunning says whether any container or sandbox of the pod may still
// hold processes.
func hasRunning(observed *runtime.PodStatus) bool {
	for _, c := range observed.Containers {
		if c.State == runtime.ContainerRunning || c.State == runtime.ContainerCreated || c.State == runtime.ContainerUnknown {
			return true
		}
	}
	for _, sb := range observed.Sandboxes {
		if sb.Ready {
			return true
		}
	}
	return false
}
