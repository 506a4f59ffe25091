package status

import (
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pod(policy v1.RestartPolicy, inits ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Generation: 1},
		Spec: v1.PodSpec{RestartPolicy: policy, Containers: []v1.Container{{Name: "c", Image: "busybox"}}}}
	for _, n := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: "busybox"})
	}
	return p
}

func observed(cs ...*runtime.ContainerStatus) *runtime.PodStatus {
	s := &runtime.PodStatus{Sandboxes: []*runtime.SandboxStatus{{ID: "sb", Ready: true, IPs: []string{"10.244.0.5"}}}}
	for i, c := range cs {
		c.CreatedAt = t0.Add(time.Duration(i) * time.Second)
		s.Containers = append(s.Containers, c)
	}
	s.SortNewestFirst()
	return s
}

func ctr(name string, state runtime.ContainerState, code int32) *runtime.ContainerStatus {
	return &runtime.ContainerStatus{ID: name + "-id", Name: name, State: state, ExitCode: code, StartedAt: t0, FinishedAt: t0.Add(time.Second), Image: "docker.io/library/busybox:1.37", ImageRef: "sha256:abc"}
}

func cond(st v1.PodStatus, t v1.PodConditionType) v1.PodCondition {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1.PodCondition{}
}

func TestCompute(t *testing.T) {
	initDone := ctr("i", runtime.ContainerExited, 0)
	initDone.Init = true
	initFailed := ctr("i", runtime.ContainerExited, 1)
	initFailed.Init = true
	tests := []struct {
		name      string
		in        Input
		phase     v1.PodPhase
		ready     v1.ConditionStatus
		initd     v1.ConditionStatus
		state     string // of container c: waiting reason, "running" or terminated reason
		exitCode  int32
		lastState string
	}{
		{name: "nothing yet: pending, container creating", in: Input{Pod: pod(v1.RestartPolicyAlways), Observed: &runtime.PodStatus{}},
			phase: v1.PodPending, ready: v1.ConditionFalse, initd: v1.ConditionTrue, state: "ContainerCreating"},
		{name: "running", in: Input{Pod: pod(v1.RestartPolicyAlways), Observed: observed(ctr("c", runtime.ContainerRunning, 0))},
			phase: v1.PodRunning, ready: v1.ConditionTrue, initd: v1.ConditionTrue, state: "running"},
		{name: "Never, exit 0: succeeded", in: Input{Pod: pod(v1.RestartPolicyNever), Observed: observed(ctr("c", runtime.ContainerExited, 0))},
			phase: v1.PodSucceeded, ready: v1.ConditionFalse, initd: v1.ConditionTrue, state: "Completed"},
		{name: "Never, exit 3: failed", in: Input{Pod: pod(v1.RestartPolicyNever), Observed: observed(ctr("c", runtime.ContainerExited, 3))},
			phase: v1.PodFailed, ready: v1.ConditionFalse, initd: v1.ConditionTrue, state: "Error", exitCode: 3},
		{name: "OnFailure, exit 3: running, restarting", in: Input{Pod: pod(v1.RestartPolicyOnFailure), Observed: observed(ctr("c", runtime.ContainerExited, 3))},
			phase: v1.PodRunning, ready: v1.ConditionFalse, initd: v1.ConditionTrue, state: "Error", exitCode: 3},
		{name: "crash loop: waiting with last state", in: Input{Pod: pod(v1.RestartPolicyAlways), Observed: observed(ctr("c", runtime.ContainerExited, 1)),
			Waiting: map[string]Waiting{"c": {Reason: "CrashLoopBackOff"}}},
			phase: v1.PodRunning, ready: v1.ConditionFalse, initd: v1.ConditionTrue, state: "CrashLoopBackOff", lastState: "Error"},
		{name: "init pending", in: Input{Pod: pod(v1.RestartPolicyAlways, "i"), Observed: observed()},
			phase: v1.PodPending, ready: v1.ConditionFalse, initd: v1.ConditionFalse, state: "PodInitializing"},
		{name: "init done, app running", in: Input{Pod: pod(v1.RestartPolicyAlways, "i"), Observed: observed(initDone, ctr("c", runtime.ContainerRunning, 0))},
			phase: v1.PodRunning, ready: v1.ConditionTrue, initd: v1.ConditionTrue, state: "running"},
		{name: "init failed, Never: failed", in: Input{Pod: pod(v1.RestartPolicyNever, "i"), Observed: observed(initFailed)},
			phase: v1.PodFailed, ready: v1.ConditionFalse, initd: v1.ConditionFalse, state: "PodInitializing"},
		{name: "init failed, Never, ended: the app container stays waiting", in: Input{Pod: pod(v1.RestartPolicyNever, "i"), Terminal: true, Observed: observed(initFailed)},
			phase: v1.PodFailed, ready: v1.ConditionFalse, initd: v1.ConditionFalse, state: "PodInitializing"},
		{name: "init done, deleted before the app started: unknown", in: Input{Pod: pod(v1.RestartPolicyAlways, "i"), Terminal: true, Observed: observed(initDone)},
			phase: v1.PodFailed, ready: v1.ConditionFalse, initd: v1.ConditionTrue, state: "ContainerStatusUnknown", exitCode: 137},
		{name: "deleted before anything started: unknown", in: Input{Pod: pod(v1.RestartPolicyAlways), Terminal: true, Observed: &runtime.PodStatus{}},
			phase: v1.PodFailed, ready: v1.ConditionFalse, initd: v1.ConditionTrue, state: "ContainerStatusUnknown", exitCode: 137},
		{name: "deleted while running: terminal, killed: failed", in: Input{Pod: pod(v1.RestartPolicyAlways), Terminal: true, Observed: observed(ctr("c", runtime.ContainerExited, 137))},
			phase: v1.PodFailed, ready: v1.ConditionFalse, initd: v1.ConditionTrue, state: "Error", exitCode: 137},
		{name: "deleted, exited 0 on SIGTERM: succeeded", in: Input{Pod: pod(v1.RestartPolicyAlways), Terminal: true, Observed: observed(ctr("c", runtime.ContainerExited, 0))},
			phase: v1.PodSucceeded, ready: v1.ConditionFalse, initd: v1.ConditionTrue, state: "Completed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now, tt.in.RuntimeName, tt.in.NodeIPs = t0, "containerd", []string{"10.254.254.1"}
			st := Compute(tt.in)
			if st.Phase != tt.phase {
				t.Errorf("phase = %s, want %s", st.Phase, tt.phase)
			}
			if c := cond(st, v1.PodReady); c.Status != tt.ready {
				t.Errorf("Ready = %s, want %s", c.Status, tt.ready)
			}
			if c := cond(st, v1.PodInitialized); c.Status != tt.initd {
				t.Errorf("Initialized = %s (%s), want %s", c.Status, c.Message, tt.initd)
			}
			cs := st.ContainerStatuses[0]
			got, code := "", int32(0)
			switch {
			case cs.State.Running != nil:
				got = "running"
			case cs.State.Waiting != nil:
				got = cs.State.Waiting.Reason
			case cs.State.Terminated != nil:
				got, code = cs.State.Terminated.Reason, cs.State.Terminated.ExitCode
			}
			if term := cs.State.Terminated; term != nil && term.Reason != "ContainerStatusUnknown" && term.ContainerID != "containerd://c-id" {
				t.Errorf("terminated containerID %q, want containerd://c-id", term.ContainerID)
			}
			if got != tt.state || code != tt.exitCode {
				t.Errorf("state = %s/%d, want %s/%d", got, code, tt.state, tt.exitCode)
			}
			last := ""
			if lt := cs.LastTerminationState.Terminated; lt != nil {
				last = lt.Reason
			}
			if last != tt.lastState {
				t.Errorf("lastState = %q, want %q", last, tt.lastState)
			}
			if st.HostIP != "10.254.254.1" || st.QOSClass != v1.PodQOSBestEffort || st.StartTime == nil {
				t.Errorf("hostIP %q qos %q startTime %v", st.HostIP, st.QOSClass, st.StartTime)
			}
		})
	}
}

func TestQOSClass(t *testing.T) {
	rl := func(cpu, mem string) v1.ResourceList {
		out := v1.ResourceList{}
		if cpu != "" {
			out[v1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			out[v1.ResourceMemory] = resource.MustParse(mem)
		}
		return out
	}
	tests := []struct {
		name     string
		req, lim v1.ResourceList
		want     v1.PodQOSClass
	}{
		{name: "none", want: v1.PodQOSBestEffort},
		{name: "requests only", req: rl("100m", ""), want: v1.PodQOSBurstable},
		{name: "limits only, both", lim: rl("1", "1Gi"), want: v1.PodQOSGuaranteed},
		{name: "equal", req: rl("1", "1Gi"), lim: rl("1", "1Gi"), want: v1.PodQOSGuaranteed},
		{name: "unequal", req: rl("500m", "1Gi"), lim: rl("1", "1Gi"), want: v1.PodQOSBurstable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod(v1.RestartPolicyAlways)
			p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: tt.req, Limits: tt.lim}
			if got := QOSClass(p); got != tt.want {
				t.Errorf("QOSClass = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestMergeNeverRevertsTerminalPhase(t *testing.T) {
	cur := v1.PodStatus{Phase: v1.PodSucceeded, Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue}}}
	got := Merge(cur, v1.PodStatus{Phase: v1.PodRunning})
	if got.Phase != v1.PodSucceeded {
		t.Errorf("phase = %s, want Succeeded kept", got.Phase)
	}
	got = Merge(v1.PodStatus{Phase: v1.PodPending, Conditions: cur.Conditions}, v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}})
	if len(got.Conditions) != 2 || got.Conditions[1].Type != v1.DisruptionTarget {
		t.Errorf("conditions = %+v, want Ready then the foreign DisruptionTarget", got.Conditions)
	}
}

func TestComputeTerminationMessage(t *testing.T) {
	for _, tc := range []struct {
		name, runtimeMsg, termMsg, want string
	}{
		{name: "file only", termMsg: "bye", want: "bye"},
		{name: "runtime's message first", runtimeMsg: "OOMKilled", termMsg: "bye", want: "OOMKilled: bye"},
		{name: "runtime's only", runtimeMsg: "oops", want: "oops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ctr("c", runtime.ContainerExited, 1)
			c.Message, c.TerminationMessage = tc.runtimeMsg, tc.termMsg
			st := Compute(Input{Pod: pod(v1.RestartPolicyNever), Observed: observed(c), Now: t0})
			term := st.ContainerStatuses[0].State.Terminated
			if term == nil || term.Message != tc.want {
				t.Errorf("terminated %+v, want message %q", term, tc.want)
			}
		})
	}
}

// TestComputeAgainFromWrittenStatus: the status computed from the pod as the apiserver
// returns it after the first write (times at the second) is the same as the first, so an
// unchanged pod gives the status manager nothing new to write, or to read the pod for.
func TestComputeAgainFromWrittenStatus(t *testing.T) {
	in := Input{Pod: pod(v1.RestartPolicyAlways), Observed: observed(ctr("c", runtime.ContainerRunning, 0)),
		Now: t0.Add(5*time.Second + 123456789*time.Nanosecond)}
	first := Compute(in)
	b, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	again := in
	again.Pod = in.Pod.DeepCopy()
	if err := json.Unmarshal(b, &again.Pod.Status); err != nil {
		t.Fatal(err)
	}
	again.Now = in.Now.Add(30 * time.Second)
	if second := Compute(again); !apiequality.Semantic.DeepEqual(first, second) {
		t.Fatalf("the status computed again from the written one differs:\nfirst  %+v\nsecond %+v", first, second)
	}
}
