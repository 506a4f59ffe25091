package sync

import (
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/probe"
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
		{name: "old dead containers are left to the garbage collector", pod: basePod(),
			observed: obs(&runtime.ContainerStatus{ID: "a0", Name: "a", State: runtime.ContainerExited}, &runtime.ContainerStatus{ID: "a1", Name: "a", State: runtime.ContainerExited}, running("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := computePodActions(tt.pod, tt.observed, nil, nil)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("computePodActions:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func withSidecars(names ...string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		always := v1.ContainerRestartPolicyAlways
		for _, n := range names {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: "busybox", RestartPolicy: &always})
		}
	}
}

func withProbe(init bool, idx int, set func(c *v1.Container)) func(*v1.Pod) {
	return func(p *v1.Pod) {
		if init {
			set(&p.Spec.InitContainers[idx])
		} else {
			set(&p.Spec.Containers[idx])
		}
	}
}

func initRunning(name string) *runtime.ContainerStatus {
	c := running(name)
	c.Init = true
	return c
}

func TestComputePodActionsProbesAndSidecars(t *testing.T) {
	liveness := func(c *v1.Container) { c.LivenessProbe = &v1.Probe{} }
	startup := func(c *v1.Container) { c.StartupProbe = &v1.Probe{} }
	grace := int64(5)
	livenessGrace := func(c *v1.Container) { c.LivenessProbe = &v1.Probe{TerminationGracePeriodSeconds: &grace} }
	tests := []struct {
		name     string
		pod      *v1.Pod
		observed *runtime.PodStatus
		probes   probeResults
		want     podActions
	}{
		{name: "liveness failed: kill, to be restarted", pod: basePod(withProbe(false, 0, livenessGrace)),
			observed: obs(running("a"), running("b")), probes: probeResults{"a-id": {Liveness: probe.Failure}},
			want: podActions{SandboxID: "sb", NextInit: -1, ProbeKills: []probeKill{{ID: "a-id", Name: "a",
				Message: "Container a failed liveness probe, will be restarted", Grace: &grace}}}},
		{name: "liveness failed, Never: kill, not restarted", pod: basePod(withProbe(false, 0, liveness), withPolicy(v1.RestartPolicyNever)),
			observed: obs(running("a"), running("b")), probes: probeResults{"a-id": {Liveness: probe.Failure}},
			want: podActions{SandboxID: "sb", NextInit: -1, ProbeKills: []probeKill{{ID: "a-id", Name: "a", Message: "Container a failed liveness probe"}}}},
		{name: "liveness failed, the container's own Never in a pod of Always: not restarted",
			pod: basePod(withProbe(false, 0, func(c *v1.Container) {
				liveness(c)
				c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
			})),
			observed: obs(running("a"), running("b")), probes: probeResults{"a-id": {Liveness: probe.Failure}},
			want: podActions{SandboxID: "sb", NextInit: -1, ProbeKills: []probeKill{{ID: "a-id", Name: "a", Message: "Container a failed liveness probe"}}}},
		{name: "liveness failed, the container's own OnFailure in a pod of Never: restarted",
			pod: basePod(withPolicy(v1.RestartPolicyNever), withProbe(false, 0, func(c *v1.Container) {
				liveness(c)
				c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyOnFailure)
			})),
			observed: obs(running("a"), running("b")), probes: probeResults{"a-id": {Liveness: probe.Failure}},
			want: podActions{SandboxID: "sb", NextInit: -1, ProbeKills: []probeKill{{ID: "a-id", Name: "a", Message: "Container a failed liveness probe, will be restarted"}}}},
		{name: "startup failed: kill", pod: basePod(withProbe(false, 1, startup)),
			observed: obs(running("a"), running("b")), probes: probeResults{"b-id": {Startup: probe.Failure}},
			want: podActions{SandboxID: "sb", NextInit: -1, ProbeKills: []probeKill{{ID: "b-id", Name: "b", Message: "Container b failed startup probe, will be restarted"}}}},
		{name: "liveness passing: nothing", pod: basePod(withProbe(false, 0, liveness)),
			observed: obs(running("a"), running("b")), probes: probeResults{"a-id": {Liveness: probe.Success}},
			want: podActions{SandboxID: "sb", NextInit: -1}},
		{name: "a failure without that probe in the spec is ignored", pod: basePod(),
			observed: obs(running("a"), running("b")), probes: probeResults{"a-id": {Liveness: probe.Failure}},
			want: podActions{SandboxID: "sb", NextInit: -1}},
		{name: "sidecar first: started before the next init container", pod: basePod(withSidecars("s"), withInit("i")), observed: obs(),
			want: podActions{SandboxID: "sb", NextInit: 0}},
		{name: "sidecar running: next init container starts beside it", pod: basePod(withSidecars("s"), withInit("i")), observed: obs(initRunning("s")),
			want: podActions{SandboxID: "sb", NextInit: 1}},
		{name: "sidecar with a startup probe not yet passed: wait", pod: basePod(withSidecars("s"), withInit("i"), withProbe(true, 0, startup)),
			observed: obs(initRunning("s")), probes: probeResults{"s-id": {Startup: probe.Unknown}},
			want: podActions{SandboxID: "sb", NextInit: -1}},
		{name: "sidecar started per its startup probe: next", pod: basePod(withSidecars("s"), withInit("i"), withProbe(true, 0, startup)),
			observed: obs(initRunning("s")), probes: probeResults{"s-id": {Startup: probe.Success}},
			want: podActions{SandboxID: "sb", NextInit: 1}},
		{name: "sidecar and init done: app containers", pod: basePod(withSidecars("s"), withInit("i")), observed: obs(initRunning("s"), initExited("i", 0)),
			want: podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0, 1}}},
		{name: "sidecar exited while apps run: restart it, apps go on", pod: basePod(withSidecars("s"), withInit("i")),
			observed: obs(initExited("s", 1), initExited("i", 0), running("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, SidecarsToStart: []int{0}}},
		{name: "sidecar exited before the next init ran: restart it and wait", pod: basePod(withSidecars("s"), withInit("i")),
			observed: obs(initExited("s", 0)),
			want:     podActions{SandboxID: "sb", NextInit: -1, SidecarsToStart: []int{0}}},
		{name: "sidecar restarts even with restartPolicy Never", pod: basePod(withSidecars("s"), withPolicy(v1.RestartPolicyNever)),
			observed: obs(initExited("s", 1), running("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, SidecarsToStart: []int{0}}},
		{name: "sidecar's image changed: replaced, apps go on", pod: basePod(withSidecars("s"), func(p *v1.Pod) { p.Spec.InitContainers[0].Image = "busybox:2" }),
			observed: obs(hashed(initRunning("s"), "busybox"), running("a"), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToKill: []string{"s-id"}}},
		{name: "sidecar liveness failed: killed, apps go on", pod: basePod(withSidecars("s"), withProbe(true, 0, liveness)),
			observed: obs(initRunning("s"), running("a"), running("b")), probes: probeResults{"s-id": {Liveness: probe.Failure}},
			want: podActions{SandboxID: "sb", NextInit: -1, ProbeKills: []probeKill{{ID: "s-id", Name: "s", Init: true, Message: "Init container s failed liveness probe"}}}},
		{name: "Job-style: app done, sidecar running: pod done", pod: basePod(withSidecars("s"), withPolicy(v1.RestartPolicyNever), func(p *v1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] }),
			observed: obs(initRunning("s"), exited("a", 0)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "OnFailure Job: app succeeded, sidecar crashed: pod done", pod: basePod(withSidecars("s"), withPolicy(v1.RestartPolicyOnFailure), func(p *v1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] }),
			observed: obs(initExited("s", 1), exited("a", 0)),
			want:     podActions{SandboxID: "sb", NextInit: -1, SidecarsToStart: []int{0}, KillPod: true, Done: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := computePodActions(tt.pod, tt.observed, tt.probes, nil)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("computePodActions:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
