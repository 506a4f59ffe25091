package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func phasePod(policy v1.RestartPolicy, mut ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: policy,
		Containers: []v1.Container{{Name: "a"}, {Name: "b"}}}}
	for _, m := range mut {
		m(p)
	}
	return p
}

// own gives container idx (an init container when init) a restartPolicy
// of its own and the restart rules given.
func own(init bool, idx int, p v1.ContainerRestartPolicy, rules ...v1.ContainerRestartRule) func(*v1.Pod) {
	return func(pod *v1.Pod) {
		c := &pod.Spec.Containers[idx]
		if init {
			c = &pod.Spec.InitContainers[idx]
		}
		c.RestartPolicy, c.RestartPolicyRules = &p, rules
	}
}

func withInitContainer(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{{Name: "i"}} }

func rule(action v1.ContainerRestartRuleAction, op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
	return v1.ContainerRestartRule{Action: action, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
}

var restartOn42 = rule(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpIn, 42)

func csRunning() v1.ContainerStatus {
	return v1.ContainerStatus{State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
}

func csExited(code int32) v1.ContainerStatus {
	return v1.ContainerStatus{State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
}

// csBackOff is a container waiting out its back-off after exiting with code.
func csBackOff(code int32) v1.ContainerStatus {
	return v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
}

func TestPhaseRestartRules(t *testing.T) {
	never, always, onFailure := v1.RestartPolicyNever, v1.RestartPolicyAlways, v1.RestartPolicyOnFailure
	tests := []struct {
		name     string
		pod      *v1.Pod
		inits    []v1.ContainerStatus
		statuses []v1.ContainerStatus
		terminal bool
		want     v1.PodPhase
	}{
		// The pod's policy alone, as before container policies.
		{name: "Always: all exited, restarting", pod: phasePod(always), statuses: []v1.ContainerStatus{csExited(0), csExited(1)}, want: v1.PodRunning},
		{name: "OnFailure: a failure restarts", pod: phasePod(onFailure), statuses: []v1.ContainerStatus{csExited(0), csBackOff(1)}, want: v1.PodRunning},
		{name: "OnFailure: all succeeded", pod: phasePod(onFailure), statuses: []v1.ContainerStatus{csExited(0), csExited(0)}, want: v1.PodSucceeded},
		{name: "Never: one failed", pod: phasePod(never), statuses: []v1.ContainerStatus{csExited(0), csExited(1)}, want: v1.PodFailed},
		{name: "Never: all succeeded", pod: phasePod(never), statuses: []v1.ContainerStatus{csExited(0), csExited(0)}, want: v1.PodSucceeded},

		{name: "Never pod, rule matched: running while it restarts",
			pod: phasePod(never, own(false, 0, v1.ContainerRestartPolicyNever, restartOn42)), statuses: []v1.ContainerStatus{csExited(42), csExited(0)}, want: v1.PodRunning},
		{name: "Never pod, rule matched, in back-off: running",
			pod: phasePod(never, own(false, 0, v1.ContainerRestartPolicyNever, restartOn42)), statuses: []v1.ContainerStatus{csBackOff(42), csExited(0)}, want: v1.PodRunning},
		{name: "Never pod, rule matched, the other still runs: running",
			pod: phasePod(never, own(false, 0, v1.ContainerRestartPolicyNever, restartOn42)), statuses: []v1.ContainerStatus{csExited(42), csRunning()}, want: v1.PodRunning},
		{name: "Never pod, no rule matched: failed",
			pod: phasePod(never, own(false, 0, v1.ContainerRestartPolicyNever, restartOn42)), statuses: []v1.ContainerStatus{csExited(1), csExited(0)}, want: v1.PodFailed},
		{name: "Never pod, restarted after a match, then succeeded",
			pod: phasePod(never, own(false, 0, v1.ContainerRestartPolicyNever, restartOn42)), statuses: []v1.ContainerStatus{csExited(0), csExited(0)}, want: v1.PodSucceeded},
		{name: "a match ends when the pod is terminal",
			pod: phasePod(never, own(false, 0, v1.ContainerRestartPolicyNever, restartOn42)), statuses: []v1.ContainerStatus{csExited(42), csExited(0)}, terminal: true, want: v1.PodFailed},
		{name: "Never pod, container Always that succeeded: running",
			pod: phasePod(never, own(false, 0, v1.ContainerRestartPolicyAlways)), statuses: []v1.ContainerStatus{csExited(0), csExited(1)}, want: v1.PodRunning},
		{name: "Never pod, container OnFailure that failed: running",
			pod: phasePod(never, own(false, 1, v1.ContainerRestartPolicyOnFailure)), statuses: []v1.ContainerStatus{csExited(0), csExited(1)}, want: v1.PodRunning},
		{name: "Always pod, every container Never, one failed: failed",
			pod:      phasePod(always, own(false, 0, v1.ContainerRestartPolicyNever), own(false, 1, v1.ContainerRestartPolicyNever)),
			statuses: []v1.ContainerStatus{csExited(0), csExited(1)}, want: v1.PodFailed},
		{name: "Always pod, every container Never, all succeeded: succeeded",
			pod:      phasePod(always, own(false, 0, v1.ContainerRestartPolicyNever), own(false, 1, v1.ContainerRestartPolicyNever)),
			statuses: []v1.ContainerStatus{csExited(0), csExited(0)}, want: v1.PodSucceeded},
		{name: "Always pod, one container Never, the other restarts: running",
			pod: phasePod(always, own(false, 0, v1.ContainerRestartPolicyNever)), statuses: []v1.ContainerStatus{csExited(1), csExited(0)}, want: v1.PodRunning},

		{name: "init container, rule matched in a Never pod: pending",
			pod:   phasePod(never, withInitContainer, own(true, 0, v1.ContainerRestartPolicyNever, restartOn42)),
			inits: []v1.ContainerStatus{csBackOff(42)}, statuses: []v1.ContainerStatus{{}, {}}, want: v1.PodPending},
		{name: "init container, no rule matched in a Never pod: failed",
			pod:   phasePod(never, withInitContainer, own(true, 0, v1.ContainerRestartPolicyNever, restartOn42)),
			inits: []v1.ContainerStatus{csExited(1)}, statuses: []v1.ContainerStatus{{}, {}}, want: v1.PodFailed},
		{name: "init container Never in an Always pod: failed",
			pod:   phasePod(always, withInitContainer, own(true, 0, v1.ContainerRestartPolicyNever)),
			inits: []v1.ContainerStatus{csExited(1)}, statuses: []v1.ContainerStatus{{}, {}}, want: v1.PodFailed},
		{name: "init container OnFailure in a Never pod: pending",
			pod:   phasePod(never, withInitContainer, own(true, 0, v1.ContainerRestartPolicyOnFailure)),
			inits: []v1.ContainerStatus{csExited(1)}, statuses: []v1.ContainerStatus{{}, {}}, want: v1.PodPending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Phase(tt.pod, tt.inits, tt.statuses, tt.terminal); got != tt.want {
				t.Errorf("Phase = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestRestartsOnExit(t *testing.T) {
	restartAll42 := rule(v1.ContainerRestartRuleActionRestartAllContainers, v1.ContainerRestartRuleOnExitCodesOpIn, 42)
	notIn01 := rule(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpNotIn, 0, 1)
	tests := []struct {
		name string
		pod  *v1.Pod
		code int32
		want bool
	}{
		{name: "pod Always", pod: phasePod(v1.RestartPolicyAlways), code: 0, want: true},
		{name: "pod unset counts as Always", pod: phasePod(""), code: 0, want: true},
		{name: "pod OnFailure, success", pod: phasePod(v1.RestartPolicyOnFailure), code: 0, want: false},
		{name: "pod OnFailure, failure", pod: phasePod(v1.RestartPolicyOnFailure), code: 2, want: true},
		{name: "pod Never", pod: phasePod(v1.RestartPolicyNever), code: 2, want: false},
		{name: "own Always over pod Never", pod: phasePod(v1.RestartPolicyNever, own(false, 0, v1.ContainerRestartPolicyAlways)), code: 0, want: true},
		{name: "own Never over pod Always", pod: phasePod(v1.RestartPolicyAlways, own(false, 0, v1.ContainerRestartPolicyNever)), code: 1, want: false},
		{name: "own OnFailure, success", pod: phasePod(v1.RestartPolicyAlways, own(false, 0, v1.ContainerRestartPolicyOnFailure)), code: 0, want: false},
		{name: "In rule matches", pod: phasePod(v1.RestartPolicyNever, own(false, 0, v1.ContainerRestartPolicyNever, restartOn42)), code: 42, want: true},
		{name: "In rule does not match", pod: phasePod(v1.RestartPolicyNever, own(false, 0, v1.ContainerRestartPolicyNever, restartOn42)), code: 41, want: false},
		{name: "NotIn rule matches", pod: phasePod(v1.RestartPolicyNever, own(false, 0, v1.ContainerRestartPolicyNever, notIn01)), code: 2, want: true},
		{name: "NotIn rule does not match", pod: phasePod(v1.RestartPolicyNever, own(false, 0, v1.ContainerRestartPolicyNever, notIn01)), code: 1, want: false},
		{name: "rule without exit codes matches nothing",
			pod:  phasePod(v1.RestartPolicyNever, own(false, 0, v1.ContainerRestartPolicyNever, v1.ContainerRestartRule{Action: v1.ContainerRestartRuleActionRestart})),
			code: 1, want: false},
		{name: "first match decides: RestartAllContainers falls to the policy",
			pod:  phasePod(v1.RestartPolicyAlways, own(false, 0, v1.ContainerRestartPolicyNever, restartAll42, restartOn42)),
			code: 42, want: false},
		{name: "later rule matches when the first does not",
			pod:  phasePod(v1.RestartPolicyNever, own(false, 0, v1.ContainerRestartPolicyNever, restartAll42, notIn01)),
			code: 7, want: true},
		{name: "rules without an own policy are not read",
			pod:  phasePod(v1.RestartPolicyNever, func(p *v1.Pod) { p.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{restartOn42} }),
			code: 42, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RestartsOnExit(tt.pod, &tt.pod.Spec.Containers[0], tt.code); got != tt.want {
				t.Errorf("RestartsOnExit(%d) = %v, want %v", tt.code, got, tt.want)
			}
		})
	}
}
