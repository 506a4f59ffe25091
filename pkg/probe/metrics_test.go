package probe

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

type fakeMetrics struct {
	observed  []string
	forgotten []string
}

func (f *fakeMetrics) ObserveProbe(kind, result string, pod *v1.Pod, container string, _ time.Duration) {
	f.observed = append(f.observed, kind+"/"+result+"/"+pod.Name+"/"+container)
}

func (f *fakeMetrics) ForgetProbe(kind string, pod *v1.Pod, container string) {
	f.forgotten = append(f.forgotten, kind+"/"+pod.Name+"/"+container)
}

func TestProbeRunsAreCounted(t *testing.T) {
	fm := &fakeMetrics{}
	m, err := NewManager(Config{Exec: nopExec{}, Recorder: record.NewFakeRecorder(10), Clock: testclock.NewFakeClock(t0), Metrics: fm})
	if err != nil {
		t.Fatal(err)
	}
	replies := []struct {
		o   outcome
		err error
	}{{outcomeSuccess, nil}, {outcomeFailure, nil}, {outcomeWarning, nil}, {outcomeFailure, errors.New("no route")}}
	i := 0
	m.probe = func(context.Context, Target, *v1.Probe) (outcome, string, error) {
		r := replies[i]
		i++
		return r.o, "out", r.err
	}
	w := &worker{m: m, key: workerKey{containerID: "c1", kind: Readiness}, spec: &v1.Probe{}, target: target("10.0.0.1")}
	for range replies {
		m.runProbe(context.Background(), w)
	}
	want := "[Readiness/successful/p/app Readiness/failed/p/app Readiness/successful/p/app Readiness/unknown/p/app]"
	if got := fmtList(fm.observed); got != want {
		t.Errorf("observed %s, want %s (a warning is a success, an error unknown)", got, want)
	}
}

func TestRemovePodForgetsProbeMetrics(t *testing.T) {
	fm := &fakeMetrics{}
	m, err := NewManager(Config{Exec: nopExec{}, Recorder: record.NewFakeRecorder(10), Clock: testclock.NewFakeClock(t0), Metrics: fm})
	if err != nil {
		t.Fatal(err)
	}
	pr := &v1.Probe{}
	pod := target("").Pod
	pod.Spec.Containers = []v1.Container{{Name: "app", LivenessProbe: pr, ReadinessProbe: pr}}
	m.UpdatePod(pod, &runtime.PodStatus{PodRef: runtime.PodRef{UID: pod.UID},
		Containers: []*runtime.ContainerStatus{{ID: "c1", Name: "app", State: runtime.ContainerRunning, StartedAt: t0}}})
	m.RemovePod(pod.UID)
	sort.Strings(fm.forgotten)
	if got := fmtList(fm.forgotten); got != "[Liveness/p/app Readiness/p/app]" {
		t.Errorf("forgotten %s, want both probes of app", got)
	}
}
