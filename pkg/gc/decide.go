// Package gc is the node's container garbage collection, as the kubelet's:
// every minute it removes the dead containers of each running pod beyond
// the newest of each name, the sandboxes a running pod has replaced, and
// what the runtime and the disk keep of pods that are gone (their dead
// containers, their stopped sandboxes, their log directories).
//
// decide (this file) computes what to remove from the PLEG's view of the
// runtime and what pkg/sync's Dispatcher holds; Collector (collector.go)
// carries it out through CRI. What a pod's own worker is about (a pod
// being admitted, ending, cleaning up) is left to the worker.
package gc

import (
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// Policy says which dead containers are kept: the kubelet's container GC
// policy, whose flags are deprecated and which KubeletConfiguration does
// not carry. There is no node-wide cap (the kubelet's MaxContainers, -1 by
// default).
type Policy struct {
	// MinAge: a container created less than this long ago stays.
	MinAge time.Duration
	// MaxPerPodContainer is how many dead containers of each name a
	// running pod keeps.
	MaxPerPodContainer int
}

// DefaultPolicy is the kubelet's: no minimum age, one dead container of
// each name (the one `kubectl logs --previous` and the pod's lastState
// show).
var DefaultPolicy = Policy{MinAge: 0, MaxPerPodContainer: 1}

// input is what one collection decides from.
type input struct {
	// pods are the runtime's pods as the PLEG last saw them, each with
	// its sandboxes and containers newest first (pkg/sync's order: its
	// newest container of a name and its latest sandbox are these).
	pods []*runtime.PodStatus
	// held are the pods the agent holds, read after pods: true for those
	// whose worker runs them (sync.Dispatcher.PodsHeld).
	held map[types.UID]bool
	// listed: every pod source has listed its pods, so a pod not held is
	// gone (the kubelet's allSourcesReady).
	listed bool
	// logDirs are the names of the directories in the pod logs directory.
	logDirs []string
	// known are the pods this run of the agent has seen in the runtime or
	// held: only their log directories are its own to remove, since
	// several agents may share one pod logs directory.
	known  map[types.UID]bool
	now    time.Time
	policy Policy
	// stoppedToo: the pods held but stopped (ended, not deleted) lose
	// their dead containers and sandboxes too, as when the eviction
	// manager asks for disk space.
	stoppedToo bool
}

// plan is what one collection removes: containers first, oldest first
// within each pod and name, then sandboxes, then log directories.
type plan struct {
	containers []containerRemoval
	sandboxes  []sandboxRemoval
	logDirs    []logDirRemoval
}

// containerRemoval is a dead container to remove.
type containerRemoval struct {
	pod       runtime.PodRef
	id, name  string
	sandboxID string
	// unknown: the runtime lost track of it, so it may still hold
	// processes; it is stopped first.
	unknown bool
}

// sandboxRemoval is a sandbox that is not ready and holds no container.
type sandboxRemoval struct {
	pod runtime.PodRef
	id  string
}

// logDirRemoval is a pod log directory (<namespace>_<name>_<uid>) of a
// pod that is gone and of which the runtime keeps nothing.
type logDirRemoval struct {
	uid  types.UID
	name string
}

// decide returns what to remove. It is pure.
//
// A running pod (its worker syncs it) keeps the newest container of each
// name whatever its state (its restart count, back-off and status come
// from it), every running container, and the newest MaxPerPodContainer
// dead (exited or unknown) ones; a container created but never started
// that a newer one has superseded goes. Its latest sandbox stays; older
// ones go once they are not ready and hold no container.
//
// A gone pod (not held, every source listed) loses every container that
// does not run and every sandbox that is not ready and holds none; what
// still runs is its orphan worker's to stop (sync.Dispatcher starts one).
// Its log directory goes once the runtime keeps nothing of it, if this
// run of the agent has known the pod.
//
// With stoppedToo, a pod held but not run of which nothing runs any
// more (it ended and is not deleted) is treated as a gone one, save for
// its log directory.
//
// Every other pod is left alone: it is waiting for admission, ending or
// cleaning up under its worker, or the sources have not listed yet.
func decide(in input) plan {
	var p plan
	pods := slices.Clone(in.pods)
	slices.SortFunc(pods, func(a, b *runtime.PodStatus) int { return strings.Compare(string(a.UID), string(b.UID)) })
	// left counts what the runtime keeps of each pod once the plan is
	// carried out.
	left := map[types.UID]int{}
	for _, pod := range pods {
		var removed []containerRemoval
		runs, held := in.held[pod.UID]
		switch {
		case held && runs:
			removed = trimContainers(pod, in)
		case !held && in.listed:
			removed = deadContainers(pod, in)
		case held && in.stoppedToo && !running(pod):
			removed = deadContainers(pod, in)
		default:
			left[pod.UID] = len(pod.Containers) + len(pod.Sandboxes)
			continue
		}
		sandboxes := emptySandboxes(pod, removed, held && runs)
		p.containers = append(p.containers, removed...)
		p.sandboxes = append(p.sandboxes, sandboxes...)
		left[pod.UID] = len(pod.Containers) - len(removed) + len(pod.Sandboxes) - len(sandboxes)
	}
	if !in.listed {
		return p
	}
	names := slices.Clone(in.logDirs)
	slices.Sort(names)
	for _, name := range names {
		uid, ok := logDirUID(name)
		if _, held := in.held[uid]; !ok || held || !in.known[uid] || left[uid] > 0 {
			continue
		}
		p.logDirs = append(p.logDirs, logDirRemoval{uid: uid, name: name})
	}
	return p
}

// trimContainers picks the dead containers of a running pod beyond those
// kept, oldest first within each name.
func trimContainers(pod *runtime.PodStatus, in input) []containerRemoval {
	var out []containerRemoval
	for _, group := range byName(pod) {
		var remove []containerRemoval
		dead := 0
		for i, c := range group {
			if c.State == runtime.ContainerRunning || in.now.Sub(c.CreatedAt) < in.policy.MinAge {
				continue
			}
			isDead := c.State == runtime.ContainerExited || c.State == runtime.ContainerUnknown
			if isDead {
				dead++
			}
			switch {
			case i == 0:
				// The newest stays, in whatever state: the worker reads its
				// restart count and back-off from it, and a created one is
				// about to start.
			case !isDead:
				// Created but never started, and superseded: nothing to show.
				remove = append(remove, removal(pod, c))
			case dead > in.policy.MaxPerPodContainer:
				remove = append(remove, removal(pod, c))
			}
		}
		slices.Reverse(remove)
		out = append(out, remove...)
	}
	return out
}

// deadContainers picks every container of a gone pod that does not run,
// oldest first.
func deadContainers(pod *runtime.PodStatus, in input) []containerRemoval {
	var out []containerRemoval
	for _, c := range slices.Backward(pod.Containers) {
		if c.State == runtime.ContainerRunning || in.now.Sub(c.CreatedAt) < in.policy.MinAge {
			continue
		}
		out = append(out, removal(pod, c))
	}
	return out
}

// running says whether anything of the pod may still hold processes.
func running(pod *runtime.PodStatus) bool {
	for _, c := range pod.Containers {
		if c.State != runtime.ContainerExited {
			return true
		}
	}
	for _, sb := range pod.Sandboxes {
		if sb.Ready {
			return true
		}
	}
	return false
}

// emptySandboxes picks the pod's sandboxes that are not ready and hold no
// container once removed are gone, oldest first; with keepLatest (a
// running pod) the latest stays whatever its state.
func emptySandboxes(pod *runtime.PodStatus, removed []containerRemoval, keepLatest bool) []sandboxRemoval {
	gone := map[string]bool{}
	for _, r := range removed {
		gone[r.id] = true
	}
	holding := map[string]bool{}
	for _, c := range pod.Containers {
		if !gone[c.ID] {
			holding[c.SandboxID] = true
		}
	}
	var out []sandboxRemoval
	for i, sb := range slices.Backward(pod.Sandboxes) {
		if (keepLatest && i == 0) || sb.Ready || holding[sb.ID] {
			continue
		}
		out = append(out, sandboxRemoval{pod: pod.PodRef, id: sb.ID})
	}
	return out
}

// byName groups the pod's containers by name, each newest first, the
// groups in name order. Names are unique across a pod's init, app and
// ephemeral containers.
func byName(pod *runtime.PodStatus) [][]*runtime.ContainerStatus {
	groups := map[string][]*runtime.ContainerStatus{}
	var names []string
	for _, c := range pod.Containers {
		if _, ok := groups[c.Name]; !ok {
			names = append(names, c.Name)
		}
		groups[c.Name] = append(groups[c.Name], c)
	}
	slices.Sort(names)
	out := make([][]*runtime.ContainerStatus, 0, len(names))
	for _, n := range names {
		out = append(out, groups[n])
	}
	return out
}

func removal(pod *runtime.PodStatus, c *runtime.ContainerStatus) containerRemoval {
	return containerRemoval{pod: pod.PodRef, id: c.ID, name: c.Name, sandboxID: c.SandboxID,
		unknown: c.State == runtime.ContainerUnknown}
}

// logDirUID reads the pod UID from a pod log directory's name,
// <namespace>_<name>_<uid> (neither a namespace nor a pod name holds an
// underscore).
func logDirUID(name string) (types.UID, bool) {
	parts := strings.Split(name, "_")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", false
	}
	return types.UID(parts[2]), true
}
