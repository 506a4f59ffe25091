package sync

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// withOwnPolicy gives the app container (or init container) at idx a
// restartPolicy of its own and the restart rules given.
func withOwnPolicy(init bool, idx int, p v1.ContainerRestartPolicy, rules ...v1.ContainerRestartRule) func(*v1.Pod) {
	return func(pod *v1.Pod) {
		c := &pod.Spec.Containers[idx]
		if init {
			c = &pod.Spec.InitContainers[idx]
		}
		c.RestartPolicy, c.RestartPolicyRules = &p, rules
	}
}

// onExit is a restart rule: action when the exit code is (op In) or is
// not (op NotIn) one of codes.
func onExit(action v1.ContainerRestartRuleAction, op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
	return v1.ContainerRestartRule{Action: action, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
}

func oneContainer(p *v1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] }

func TestComputePodActionsRestartRules(t *testing.T) {
	restartOn42 := onExit(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpIn, 42)
	never := withPolicy(v1.RestartPolicyNever)
	deadSandbox := func() *runtime.PodStatus {
		s := obs(exited("a", 0), exited("b", 1))
		s.Sandboxes[0].Ready = false
		return s
	}
	unknownAfterRun := &runtime.ContainerStatus{ID: "a-id", Name: "a", State: runtime.ContainerUnknown, StartedAt: t0}
	tests := []struct {
		name     string
		pod      *v1.Pod
		observed *runtime.PodStatus
		want     podActions
	}{
		{name: "Never pod, rule matches: restart",
			pod:      basePod(never, withOwnPolicy(false, 0, v1.ContainerRestartPolicyNever, restartOn42)),
			observed: obs(exited("a", 42), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}}},
		{name: "Never pod, no rule matches: not restarted",
			pod:      basePod(never, withOwnPolicy(false, 0, v1.ContainerRestartPolicyNever, restartOn42)),
			observed: obs(exited("a", 1), running("b")),
			want:     podActions{SandboxID: "sb", NextInit: -1}},
		{name: "Never pod, rule matched once, then success: done",
			pod:      basePod(never, oneContainer, withOwnPolicy(false, 0, v1.ContainerRestartPolicyNever, restartOn42)),
			observed: obs(exited("a", 0)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "Never pod, no rule matches, last container: done",
			pod:      basePod(never, oneContainer, withOwnPolicy(false, 0, v1.ContainerRestartPolicyNever, restartOn42)),
			observed: obs(exited("a", 1)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "NotIn: any other code restarts",
			pod: basePod(never, oneContainer, withOwnPolicy(false, 0, v1.ContainerRestartPolicyNever,
				onExit(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpNotIn, 0, 1))),
			observed: obs(exited("a", 3)),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}}},
		{name: "NotIn: a listed code falls to the container's policy",
			pod: basePod(never, oneContainer, withOwnPolicy(false, 0, v1.ContainerRestartPolicyNever,
				onExit(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpNotIn, 0, 1))),
			observed: obs(exited("a", 1)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "rule restarts a success the OnFailure policy would not",
			pod: basePod(never, oneContainer, withOwnPolicy(false, 0, v1.ContainerRestartPolicyOnFailure,
				onExit(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpIn, 0))),
			observed: obs(exited("a", 0)),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}}},
		{name: "first matching rule decides: RestartAllContainers is not carried out, the policy is",
			pod: basePod(never, oneContainer, withOwnPolicy(false, 0, v1.ContainerRestartPolicyNever,
				onExit(v1.ContainerRestartRuleActionRestartAllContainers, v1.ContainerRestartRuleOnExitCodesOpIn, 42), restartOn42)),
			observed: obs(exited("a", 42)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "container Always in a Never pod: success restarts",
			pod:      basePod(never, withOwnPolicy(false, 0, v1.ContainerRestartPolicyAlways)),
			observed: obs(exited("a", 0), exited("b", 0)),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}}},
		{name: "container OnFailure in a Never pod: failure restarts",
			pod:      basePod(never, withOwnPolicy(false, 0, v1.ContainerRestartPolicyOnFailure)),
			observed: obs(exited("a", 1), exited("b", 0)),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}}},
		{name: "container OnFailure in a Never pod: success, all done",
			pod:      basePod(never, withOwnPolicy(false, 0, v1.ContainerRestartPolicyOnFailure)),
			observed: obs(exited("a", 0), exited("b", 1)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "container Never in an Always pod: not restarted, the other is",
			pod:      basePod(withOwnPolicy(false, 0, v1.ContainerRestartPolicyNever)),
			observed: obs(exited("a", 1), exited("b", 0)),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{1}}},
		{name: "every container Never in an Always pod: done",
			pod:      basePod(withOwnPolicy(false, 0, v1.ContainerRestartPolicyNever), withOwnPolicy(false, 1, v1.ContainerRestartPolicyNever)),
			observed: obs(exited("a", 1), exited("b", 0)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "unknown after running: the container's own Always restarts it in a Never pod",
			pod:      basePod(never, oneContainer, withOwnPolicy(false, 0, v1.ContainerRestartPolicyAlways)),
			observed: obs(unknownAfterRun),
			want:     podActions{SandboxID: "sb", NextInit: -1, ContainersToStart: []int{0}}},
		{name: "unknown after running: the container's own Never keeps it down, rules unread",
			pod:      basePod(oneContainer, withOwnPolicy(false, 0, v1.ContainerRestartPolicyNever, restartOn42)),
			observed: obs(&runtime.ContainerStatus{ID: "a-id", Name: "a", State: runtime.ContainerUnknown, StartedAt: t0}),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "dead sandbox, Always pod: an OnFailure container that succeeded stays done",
			pod:      basePod(withOwnPolicy(false, 0, v1.ContainerRestartPolicyOnFailure)),
			observed: deadSandbox(),
			want:     podActions{KillPod: true, CreateSandbox: true, SandboxAttempt: 1, NextInit: -1, ContainersToStart: []int{1}}},
		{name: "dead sandbox, OnFailure pod: an Always container that succeeded runs again",
			pod:      basePod(withPolicy(v1.RestartPolicyOnFailure), withOwnPolicy(false, 0, v1.ContainerRestartPolicyAlways)),
			observed: deadSandbox(),
			want:     podActions{KillPod: true, CreateSandbox: true, SandboxAttempt: 1, NextInit: -1, ContainersToStart: []int{0, 1}}},
		{name: "dead sandbox, Never pod: done whatever the containers' policies",
			pod:      basePod(never, withOwnPolicy(false, 0, v1.ContainerRestartPolicyAlways)),
			observed: deadSandbox(),
			want:     podActions{KillPod: true, NextInit: -1, SandboxAttempt: 1, Done: true}},
		{name: "init container, rule matches in a Never pod: run it again",
			pod:      basePod(never, withInit("i1"), withOwnPolicy(true, 0, v1.ContainerRestartPolicyNever, restartOn42)),
			observed: obs(initExited("i1", 42)),
			want:     podActions{SandboxID: "sb", NextInit: 0}},
		{name: "init container, no rule matches in a Never pod: failed",
			pod:      basePod(never, withInit("i1"), withOwnPolicy(true, 0, v1.ContainerRestartPolicyNever, restartOn42)),
			observed: obs(initExited("i1", 1)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "init container OnFailure in a Never pod: run it again",
			pod:      basePod(never, withInit("i1"), withOwnPolicy(true, 0, v1.ContainerRestartPolicyOnFailure)),
			observed: obs(initExited("i1", 1)),
			want:     podActions{SandboxID: "sb", NextInit: 0}},
		{name: "init container Never in an Always pod: failed",
			pod:      basePod(withInit("i1"), withOwnPolicy(true, 0, v1.ContainerRestartPolicyNever)),
			observed: obs(initExited("i1", 1)),
			want:     podActions{SandboxID: "sb", NextInit: -1, KillPod: true, Done: true}},
		{name: "init container with its own policy that succeeded: next",
			pod:      basePod(never, withInit("i1", "i2"), withOwnPolicy(true, 0, v1.ContainerRestartPolicyNever, restartOn42)),
			observed: obs(initExited("i1", 0)),
			want:     podActions{SandboxID: "sb", NextInit: 1}},
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
