package sync

import (
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

func basePod(mut ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways,
			Containers:    []v1.Container{{Name: "a", Image: "busybox"}, {Name: "b", Image: "busybox"}},
		},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

func withInit(names ...string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		for _, n := range names {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: "busybox"})
		}
	}
}

func withPolicy(r v1.RestartPolicy) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.RestartPolicy = r }
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// obs builds an observed pod: one ready sandbox "sb" plus containers.
func obs(containers ...*runtime.ContainerStatus) *runtime.PodStatus {
	s := &runtime.PodStatus{PodRef: runtime.PodRef{UID: "uid-1"},
		Sandboxes: []*runtime.SandboxStatus{{ID: "sb", Ready: true, CreatedAt: t0}}}
	for i, c := range containers {
		if c.SandboxID == "" {
			c.SandboxID = "sb"
		}
		c.CreatedAt = t0.Add(time.Duration(i+1) * time.Second)
		s.Containers = append(s.Containers, c)
	}
	s.SortNewestFirst()
	return s
}

func running(name string) *runtime.ContainerStatus {
	return &runtime.ContainerStatus{ID: name + "-id", Name: name, State: runtime.ContainerRunning, StartedAt: t0}
}

func exited(name string, code int32) *runtime.ContainerStatus {
	return &runtime.ContainerStatus{ID: name + "-id", Name: name, State: runtime.ContainerExited, ExitCode: code, StartedAt: t0, FinishedAt: t0.Add(time.Second)}
}

// hashed records the hash of a container spec with image on c.
func hashed(c *runtime.ContainerStatus, image string) *runtime.ContainerStatus {
	c.Hash = runtime.ContainerHash(&v1.Container{Name: c.Name, Image: image})
	return c
}

func initExited(name string, code int32) *runtime.ContainerStatus {
	c := exited(name, code)
	c.Init = true
	return c
}

func TestComputePodActions(t *testing.T) {
	noSandbox := &runtime.PodStatus{PodRef: runtime.PodRef{UID: "uid-1"}}
	deadSandbox := obs(exited("a", 0), exited("b", 1))
	deadSandbox.Sandboxes[0].Ready = false
	tests := []struct {
		name     string
		pod      *v1.Pod
		observed *runtime.PodStatus
		want     podActions
	}{
		{name: "new pod: sandbox and every container", pod: basePod(), observed: noSandbox,
			want: podActions{CreateSandbox: true, NextInit: -1, ContainersToStart: []int{0, 1}}},
		{name: "new pod with init containers: sandbox and the first init", pod: basePod(withInit("i1", "i2")), observed: noSandbox,
			want: podActions{CreateSandbox: true, NextInit: 0}},
		{name: "all running: nothing", pod: basePod(), observed: obs(running("a"), running("b")),
			want: podActions{SandboxID: "sb", NextInit: -1}},
		{name: "one missing: start it", pod: basePod(), observed: obs(running("a")),
			want: podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{1}}},
		{name: "init running: wait", pod: basePod(withInit("i1", "i2")), observed: obs(&runtime.ContainerStatus{ID: "x", Name: "i1", Init: true, State: runtime.ContainerRunning}),
			want: podActions{SandboxID: "sb", NextInit: -1}},
		{name: "first init done: second", pod: basePod(withInit("i1", "i2")), observed: obs(initExited("i1", 0)),
			want: podActions{SandboxID: "sb", NextInit: 1}},
		{name: "inits done: app containers", pod: basePod(withInit("i1", "i2")), observed: obs(initExited("i1", 0), initExited("i2", 0)),
			want: podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0, 1}}},
		{name: "init failed, Always: run it again", pod: basePod(withInit("i1")), observed: obs(initExited("i1", 1)),
			want: podActions{SandboxID: "sb", NextInit: 0}},
		{name: "init failed, Never: pod is done", pod: basePod(withInit("i1"), withPolicy(v1.RestartPolicyNever)), observed: obs(initExited("i1", 1)),
			want: podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "Always: exited 0 restarts", pod: basePod(), observed: obs(exited("a", 0), running("b")),
			want: podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}}},
		{name: "OnFailure: exit 1 restarts, exit 0 does not", pod: basePod(withPolicy(v1.RestartPolicyOnFailure)), observed: obs(exited("a", 0), exited("b", 1)),
			want: podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{1}}},
		{name: "OnFailure: all succeeded, done", pod: basePod(withPolicy(v1.RestartPolicyOnFailure)), observed: obs(exited("a", 0), exited("b", 0)),
			want: podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "Never: all exited, done", pod: basePod(withPolicy(v1.RestartPolicyNever)), observed: obs(exited("a", 0), exited("b", 2)),
			want: podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "Never: one still running, wait", pod: basePod(withPolicy(v1.RestartPolicyNever)), observed: obs(exited("a", 0), running("b")),
			want: podActions{SandboxID: "sb", NextInit: -1}},
		{name: "dead sandbox, Always: kill and recreate with attempt+1", pod: basePod(), observed: deadSandbox,
			want: podActions{KillPod: true, CreateSandbox: true, SandboxAttempt: 1, NextInit: -1, ContainersToStart: []int{0, 1}}},
		{name: "dead sandbox, OnFailure: succeeded container stays done", pod: basePod(withPolicy(v1.RestartPolicyOnFailure)), observed: deadSandbox,
			want: podActions{KillPod: true, CreateSandbox: true, SandboxAttempt: 1, NextInit: -1, ContainersToStart: []int{1}}},
		{name: "dead sandbox, Never: done, no new sandbox", pod: basePod(withPolicy(v1.RestartPolicyNever)), observed: deadSandbox,
			want: podActions{KillPod: true, NextInit: -1, SandboxAttempt: 1, Done: true}},
		{name: "changed image: replace the running container", pod: basePod(func(p *v1.Pod) { p.Spec.Containers[1].Image = "busybox:2" }),
			observed: obs(hashed(running("a"), "busybox"), hashed(running("b"), "busybox")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToKill: []string{"b-id"}, ContainersToStart: []int{1}}},
		{name: "no hash recorded: left alone", pod: basePod(func(p *v1.Pod) { p.Spec.Containers[1].Image = "busybox:2" }),
			observed: obs(running("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1}},
		{name: "old dead containers are pruned", pod: basePod(),
			observed: obs(&runtime.ContainerStatus{ID: "a0", Name: "a", State: runtime.ContainerExited}, &runtime.ContainerStatus{ID: "a1", Name: "a", State: runtime.ContainerExited}, running("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToRemove: []string{"a0"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := computePodActions(tt.pod, tt.observed)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("computePodActions:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
