package status

import (
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func running(name string) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
}

func exited(name string, code int32, reason string, at time.Time) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, FinishedAt: metav1.NewTime(at)}}}
}

func TestTerminations(t *testing.T) {
	for _, tc := range []struct {
		name      string
		old, st   v1.PodStatus
		notBefore time.Time
		want      []termination
	}{
		{
			name: "running to terminated",
			old:  v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{running("c")}},
			st:   v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited("c", 139, "Error", t0)}},
			want: []termination{{containerType: ContainerTypeContainer, exitCode: 139, reason: "Error"}},
		},
		{
			name: "first seen terminated",
			st:   v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited("c", 0, "Completed", t0)}},
			want: []termination{{containerType: ContainerTypeContainer, exitCode: 0, reason: "Completed"}},
		},
		{
			name: "still terminated",
			old:  v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited("c", 1, "Error", t0)}},
			st:   v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited("c", 1, "Error", t0)}},
		},
		{
			name: "restarted and ended again",
			old:  v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{running("c")}},
			st:   v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited("c", 2, "Error", t0.Add(time.Minute))}},
			want: []termination{{containerType: ContainerTypeContainer, exitCode: 2, reason: "Error"}},
		},
		{
			name: "init, app and ephemeral",
			old: v1.PodStatus{InitContainerStatuses: []v1.ContainerStatus{running("i")},
				ContainerStatuses: []v1.ContainerStatus{running("c"), running("d")}},
			st: v1.PodStatus{InitContainerStatuses: []v1.ContainerStatus{exited("i", 0, "Completed", t0)},
				ContainerStatuses:          []v1.ContainerStatus{running("c"), exited("d", 137, "OOMKilled", t0)},
				EphemeralContainerStatuses: []v1.ContainerStatus{exited("debug", 0, "Completed", t0)}},
			want: []termination{
				{containerType: ContainerTypeInit, exitCode: 0, reason: "Completed"},
				{containerType: ContainerTypeContainer, exitCode: 137, reason: "OOMKilled"},
				{containerType: ContainerTypeEphemeral, exitCode: 0, reason: "Completed"},
			},
		},
		{
			name:      "ended before the agent started",
			st:        v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited("old", 1, "Error", t0.Add(-time.Second)), exited("new", 1, "Error", t0)}},
			notBefore: t0,
			want:      []termination{{containerType: ContainerTypeContainer, exitCode: 1, reason: "Error"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := terminations(tc.old, tc.st, tc.notBefore); !slices.Equal(got, tc.want) {
				t.Errorf("terminations = %+v, want %+v", got, tc.want)
			}
		})
	}
}

type fakeMetrics struct{ terminated []string }

func (f *fakeMetrics) ObserveContainerTerminated(containerType string, exitCode int32, reason string) {
	f.terminated = append(f.terminated, fmt.Sprintf("%s/%d/%s", containerType, exitCode, reason))
}

func TestManagerCountsEachTerminationOnce(t *testing.T) {
	p := pod(v1.RestartPolicyAlways)
	p.Status.ContainerStatuses = []v1.ContainerStatus{running("c")}
	fm := &fakeMetrics{}
	m, _ := newManager(t, p)
	m.cfg.Metrics = fm
	crashed := v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{exited("c", 139, "Error", t0)}}
	m.Set(p, crashed)
	m.Set(p, crashed)
	waiting := v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "c",
		State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: crashed.ContainerStatuses[0].State}}}
	m.Set(p, waiting)
	m.SetFinal(p, v1.PodStatus{Phase: v1.PodFailed, ContainerStatuses: []v1.ContainerStatus{exited("c", 139, "Error", t0.Add(time.Minute))}})
	if want := []string{"container/139/Error", "container/139/Error"}; !slices.Equal(fm.terminated, want) {
		t.Errorf("counted %v, want %v: the crash, then the final exit", fm.terminated, want)
	}

	// A restarted agent compares with what the apiserver shows: what it
	// shows terminated was counted before.
	p.Status = crashed
	fm2 := &fakeMetrics{}
	m2, _ := newManager(t, p)
	m2.cfg.Metrics = fm2
	m2.Set(p, crashed)
	if len(fm2.terminated) != 0 {
		t.Errorf("a restarted agent counted %v again", fm2.terminated)
	}

	// A static pod's file has no status: what ended before the agent
	// started was counted by the run that saw it.
	static := pod(v1.RestartPolicyAlways)
	static.UID = "static-uid"
	static.Annotations = map[string]string{annotationSource: "file", annotationHash: "static-uid"}
	m2.Set(static, v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited("c", 1, "Error", t0.Add(-time.Second))}})
	m2.Set(static, v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited("c", 2, "Error", t0.Add(time.Second))}})
	m2.Set(static, v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{running("c")}})
	m2.Set(static, v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited("c", 3, "Error", t0.Add(time.Minute))}})
	if want := []string{"container/3/Error"}; !slices.Equal(fm2.terminated, want) {
		t.Errorf("static pod: counted %v, want %v", fm2.terminated, want)
	}
}
