package gc

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is t0 plus s seconds: objects are created a second or more apart.
func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// podState builds what the runtime holds of a pod (name p, namespace ns),
// sorted newest first as the PLEG sorts it.
func podState(uid string, sandboxes []*runtime.SandboxStatus, containers ...*runtime.ContainerStatus) *runtime.PodStatus {
	s := &runtime.PodStatus{PodRef: runtime.PodRef{UID: types.UID(uid), Name: "p", Namespace: "ns"},
		Sandboxes: sandboxes, Containers: containers}
	s.SortNewestFirst()
	return s
}

func sandbox(id string, ready bool, created int) *runtime.SandboxStatus {
	return &runtime.SandboxStatus{ID: id, Ready: ready, CreatedAt: at(created)}
}

// one is a single ready sandbox "sb", made before any container.
func one() []*runtime.SandboxStatus { return []*runtime.SandboxStatus{sandbox("sb", true, 0)} }

func ctr(id, name string, state runtime.ContainerState, created int, mut ...func(*runtime.ContainerStatus)) *runtime.ContainerStatus {
	c := &runtime.ContainerStatus{ID: id, Name: name, State: state, SandboxID: "sb", CreatedAt: at(created)}
	for _, m := range mut {
		m(c)
	}
	return c
}

func exited(id, name string, created int, mut ...func(*runtime.ContainerStatus)) *runtime.ContainerStatus {
	return ctr(id, name, runtime.ContainerExited, created, mut...)
}

func in(sb string) func(*runtime.ContainerStatus) {
	return func(c *runtime.ContainerStatus) { c.SandboxID = sb }
}

func initC(c *runtime.ContainerStatus) { c.Init = true }

// describe lists a plan one removal a line, in its order.
func describe(p plan) string {
	var out []string
	for _, r := range p.containers {
		line := fmt.Sprintf("container %s/%s %s", r.pod.UID, r.name, r.id)
		if r.unknown {
			line += " (stop first)"
		}
		out = append(out, line)
	}
	for _, r := range p.sandboxes {
		out = append(out, fmt.Sprintf("sandbox %s %s", r.pod.UID, r.id))
	}
	for _, r := range p.logDirs {
		out = append(out, "logs "+r.name)
	}
	return strings.Join(out, "\n")
}

func lines(l ...string) string { return strings.Join(l, "\n") }

func TestDecide(t *testing.T) {
	// base: pod uid-1 runs, every source listed, the kubelet's policy, a
	// minute after the objects were made.
	base := func(pods ...*runtime.PodStatus) input {
		return input{pods: pods, held: map[types.UID]bool{"uid-1": true}, listed: true, now: at(60), policy: DefaultPolicy}
	}
	gone := func(in *input) { delete(in.held, "uid-1") }
	ending := func(in *input) { in.held["uid-1"] = false }
	notListed := func(in *input) { in.listed = false }
	logDirs := func(names ...string) func(*input) { return func(in *input) { in.logDirs = names } }
	known := func(uids ...types.UID) func(*input) {
		return func(in *input) {
			in.known = map[types.UID]bool{}
			for _, uid := range uids {
				in.known[uid] = true
			}
		}
	}
	tests := []struct {
		name string
		in   input
		mut  []func(*input)
		want string
	}{
		{name: "running pod: the dead container beyond the newest goes, oldest first",
			in:   base(podState("uid-1", one(), exited("a1", "a", 1), exited("a2", "a", 2), exited("a3", "a", 3), ctr("a4", "a", runtime.ContainerRunning, 4))),
			want: lines("container uid-1/a a1", "container uid-1/a a2")},
		{name: "running pod: the newest, dead, and nothing older",
			in:   base(podState("uid-1", one(), exited("a1", "a", 1))),
			want: ""},
		{name: "running pod: crash loop waiting to restart keeps only the newest",
			in:   base(podState("uid-1", one(), exited("a1", "a", 1), exited("a2", "a", 2))),
			want: "container uid-1/a a1"},
		{name: "running pod: a running container never goes, older or not",
			in:   base(podState("uid-1", one(), exited("a1", "a", 1), ctr("a2", "a", runtime.ContainerRunning, 2), exited("a3", "a", 3), ctr("b1", "b", runtime.ContainerRunning, 4))),
			want: "container uid-1/a a1"},
		{name: "running pod: the newest created is about to start; the dead one before it stays for lastState",
			in:   base(podState("uid-1", one(), exited("a1", "a", 1), exited("a2", "a", 2), ctr("a3", "a", runtime.ContainerCreated, 3))),
			want: "container uid-1/a a1"},
		{name: "running pod: a created container superseded by a newer one goes",
			in:   base(podState("uid-1", one(), exited("a1", "a", 1), ctr("a2", "a", runtime.ContainerCreated, 2), ctr("a3", "a", runtime.ContainerRunning, 3))),
			want: "container uid-1/a a2"},
		{name: "running pod: an older container in an unknown state counts as dead, stopped first",
			in:   base(podState("uid-1", one(), ctr("a1", "a", runtime.ContainerUnknown, 1), exited("a2", "a", 2), ctr("a3", "a", runtime.ContainerRunning, 3))),
			want: "container uid-1/a a1 (stop first)"},
		{name: "running pod: init containers and sidecars follow the same rule",
			in: base(podState("uid-1", one(),
				exited("i1", "init", 1, initC), exited("i2", "init", 2, initC),
				exited("s1", "sidecar", 3, initC), exited("s2", "sidecar", 4, initC), ctr("s3", "sidecar", runtime.ContainerRunning, 5, initC),
				ctr("m1", "main", runtime.ContainerRunning, 6))),
			want: lines("container uid-1/init i1", "container uid-1/sidecar s1")},
		{name: "running pod: each name keeps its own",
			in:   base(podState("uid-1", one(), exited("a1", "a", 1), exited("b1", "b", 2), exited("a2", "a", 3), exited("b2", "b", 4))),
			want: lines("container uid-1/a a1", "container uid-1/b b1")},
		{name: "two pods with a container of the same name: each keeps its newest",
			in: base(
				podState("uid-1", one(), exited("x1", "main", 1), exited("x2", "main", 3)),
				podState("uid-2", one(), exited("y1", "main", 2))),
			mut:  []func(*input){func(in *input) { in.held["uid-2"] = true }},
			want: "container uid-1/main x1"},
		{name: "running pod: younger than MinAge stays",
			in:   base(podState("uid-1", one(), exited("a1", "a", 1), exited("a2", "a", 50), exited("a3", "a", 55))),
			mut:  []func(*input){func(in *input) { in.policy.MinAge = 30 * time.Second }},
			want: ""},
		{name: "running pod: older sandboxes go once not ready and empty, the latest stays",
			in: base(podState("uid-1",
				[]*runtime.SandboxStatus{sandbox("sb0", false, 0), sandbox("sb1", false, 10), sandbox("sb2", false, 20), sandbox("sb3", true, 30), sandbox("sb4", false, 40)},
				exited("a1", "a", 11, in("sb1")), exited("a2", "a", 21, in("sb2")))),
			want: lines("container uid-1/a a1", "sandbox uid-1 sb0", "sandbox uid-1 sb1")},
		{name: "running pod: a ready older sandbox stays",
			in:   base(podState("uid-1", []*runtime.SandboxStatus{sandbox("sb0", true, 0), sandbox("sb1", true, 10)})),
			want: ""},
		{name: "gone pod: every container that does not run, every empty stopped sandbox, oldest first",
			in: base(podState("uid-1", []*runtime.SandboxStatus{sandbox("sb0", false, 0), sandbox("sb", false, 5)},
				exited("i1", "init", 1, initC, in("sb0")), exited("a1", "a", 6), exited("a2", "a", 7),
				ctr("b1", "b", runtime.ContainerCreated, 8), ctr("c1", "c", runtime.ContainerUnknown, 9))),
			mut: []func(*input){gone},
			want: lines("container uid-1/init i1", "container uid-1/a a1", "container uid-1/a a2", "container uid-1/b b1",
				"container uid-1/c c1 (stop first)", "sandbox uid-1 sb0", "sandbox uid-1 sb")},
		{name: "gone pod: what still runs is left to its orphan worker, and its sandbox with it",
			in: base(podState("uid-1", []*runtime.SandboxStatus{sandbox("sb0", false, 0), sandbox("sb", true, 5)},
				exited("a1", "a", 6), ctr("b1", "b", runtime.ContainerRunning, 7))),
			mut:  []func(*input){gone, logDirs("ns_p_uid-1")},
			want: lines("container uid-1/a a1", "sandbox uid-1 sb0")},
		{name: "gone pod, sources not listed yet: nothing",
			in:   base(podState("uid-1", one(), exited("a1", "a", 1), exited("a2", "a", 2))),
			mut:  []func(*input){gone, notListed, logDirs("ns_p_uid-1", "ns_q_uid-9")},
			want: ""},
		{name: "a pod whose worker is ending it is the worker's",
			in:   base(podState("uid-1", []*runtime.SandboxStatus{sandbox("sb0", false, 0), sandbox("sb", false, 5)}, exited("a1", "a", 6), exited("a2", "a", 7))),
			mut:  []func(*input){ending, logDirs("ns_p_uid-1")},
			want: ""},
		{name: "all unused (eviction): an ended pod not deleted loses its dead containers and sandboxes, not its logs",
			in:   base(podState("uid-1", []*runtime.SandboxStatus{sandbox("sb0", false, 0), sandbox("sb", false, 5)}, exited("a1", "a", 6), exited("a2", "a", 7))),
			mut:  []func(*input){ending, logDirs("ns_p_uid-1"), known("uid-1"), func(in *input) { in.stoppedToo = true }},
			want: lines("container uid-1/a a1", "container uid-1/a a2", "sandbox uid-1 sb0", "sandbox uid-1 sb")},
		{name: "all unused (eviction): a pod still stopping is its worker's",
			in:   base(podState("uid-1", one(), exited("a1", "a", 6), ctr("b1", "b", runtime.ContainerRunning, 7))),
			mut:  []func(*input){ending, func(in *input) { in.stoppedToo = true }},
			want: ""},
		{name: "all unused (eviction): a running pod keeps its newest of each name",
			in:   base(podState("uid-1", one(), exited("a1", "a", 1), exited("a2", "a", 2))),
			mut:  []func(*input){func(in *input) { in.stoppedToo = true }},
			want: "container uid-1/a a1"},
		{name: "log directories: those of gone pods the runtime keeps nothing of, in the same pass as their last objects",
			in: base(
				podState("uid-1", one(), exited("a1", "a", 1)),
				podState("uid-3", []*runtime.SandboxStatus{sandbox("sb3", false, 0)}, exited("c1", "c", 1, in("sb3"))),
				podState("uid-4", one(), ctr("d1", "d", runtime.ContainerRunning, 1))),
			mut: []func(*input){
				logDirs("ns_p_uid-1", "ns_gone_uid-2", "ns_p_uid-3", "ns_p_uid-4", "not-a-pod-dir", "a_b_c_d"),
				known("uid-1", "uid-2", "uid-3", "uid-4"),
			},
			want: lines("container uid-3/c c1", "sandbox uid-3 sb3", "logs ns_gone_uid-2", "logs ns_p_uid-3")},
		{name: "log directories: one of a pod this agent never knew is another agent's",
			in:   base(),
			mut:  []func(*input){gone, logDirs("ns_p_uid-1", "ns_other_uid-5"), known("uid-1")},
			want: "logs ns_p_uid-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			for _, m := range tt.mut {
				m(&in)
			}
			if got := describe(decide(in)); got != tt.want {
				t.Errorf("decide:\n got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// The newest container of every name of a running pod survives any
// policy, even one that keeps no dead container.
func TestDecideKeepsTheNewestWhateverThePolicy(t *testing.T) {
	pod := podState("uid-1", one(), exited("a1", "a", 1), exited("a2", "a", 2), ctr("b1", "b", runtime.ContainerCreated, 3), exited("c1", "c", 4))
	in := input{pods: []*runtime.PodStatus{pod}, held: map[types.UID]bool{"uid-1": true}, listed: true, now: at(60),
		policy: Policy{MaxPerPodContainer: 0}}
	if got, want := describe(decide(in)), "container uid-1/a a1"; got != want {
		t.Errorf("decide with MaxPerPodContainer 0:\n got:\n%s\nwant:\n%s", got, want)
	}
}
