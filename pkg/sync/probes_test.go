package sync

import (
	"context"
	"errors"
	"strings"
	gosync "sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodeagent/nodeagent/pkg/probe"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// fakeProbes stands in for the probe manager: results are set by the
// test, hooks are logged (with the runtime's stops) and may fail.
type fakeProbes struct {
	mu       gosync.Mutex
	results  map[string]probe.Results
	log      *[]string
	failHook string // container whose hooks fail
	removed  bool
}

func (f *fakeProbes) UpdatePod(*v1.Pod, *runtime.PodStatus) {}
func (f *fakeProbes) RemovePod(types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = true
}

func (f *fakeProbes) Results(id string) probe.Results {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.results[id]
}

func (f *fakeProbes) RunHook(_ context.Context, t probe.Target, h *v1.LifecycleHandler) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	kind := "preStop"
	if t.Container.Lifecycle.PostStart == h {
		kind = "postStart"
	}
	*f.log = append(*f.log, kind+":"+t.Container.Name)
	if t.Container.Name == f.failHook {
		return "hook of " + t.Container.Name + " failed", errors.New("exit 1")
	}
	return "", nil
}

// loggingRuntime logs which containers are stopped, in order.
type loggingRuntime struct {
	*critesting.FakeRuntimeService
	mu  *gosync.Mutex
	log *[]string
}

func (r loggingRuntime) StopContainer(ctx context.Context, id string, timeout int64) error {
	r.FakeRuntimeService.Lock()
	name := r.Containers[id].Metadata.Name
	r.FakeRuntimeService.Unlock()
	r.mu.Lock()
	*r.log = append(*r.log, "stop:"+name)
	r.mu.Unlock()
	return r.FakeRuntimeService.StopContainer(ctx, id, timeout)
}

func withFakeProbes(h *harness) *fakeProbes {
	var log []string
	f := &fakeProbes{results: map[string]probe.Results{}, log: &log}
	h.w.deps.probes, h.w.deps.hooks = f, f
	h.w.deps.runtime = loggingRuntime{FakeRuntimeService: h.rt, mu: &f.mu, log: &log}
	return f
}

func (h *harness) runningID(name string) string {
	h.rt.Lock()
	defer h.rt.Unlock()
	for id, c := range h.rt.Containers {
		if c.Metadata.Name == name && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			return id
		}
	}
	h.t.Fatalf("no running %s", name)
	return ""
}

func TestWorkerRestartsOnLivenessFailure(t *testing.T) {
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		p.Spec.Containers[0].LivenessProbe = &v1.Probe{}
	})
	h := newHarness(t, pod)
	f := withFakeProbes(h)
	h.sync(pod, false)
	id := h.runningID("a")
	f.results[id] = probe.Results{Liveness: probe.Failure}
	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 0 {
		t.Fatalf("after a liveness failure running = %v, want none", got)
	}
	if ev := h.events(); !strings.Contains(ev, "Normal Killing Container a failed liveness probe, will be restarted") {
		t.Errorf("no Killing event:\n%s", ev)
	}
	h.sync(pod, false)
	if h.runningID("a") == id {
		t.Fatal("the failed container still runs")
	}
	h.sync(pod, false)
	if cs := h.status.last.ContainerStatuses[0]; cs.RestartCount != 1 || cs.State.Running == nil {
		t.Errorf("status %+v, want running with restartCount 1", cs)
	}
}

func TestWorkerReadinessInStatus(t *testing.T) {
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		p.Spec.Containers[0].ReadinessProbe = &v1.Probe{}
	})
	h := newHarness(t, pod)
	f := withFakeProbes(h)
	h.sync(pod, false)
	if cs := h.status.last.ContainerStatuses[0]; cs.Ready {
		t.Fatal("ready before the readiness probe passed")
	}
	f.results[h.runningID("a")] = probe.Results{Readiness: probe.Success}
	h.sync(pod, false)
	if cs := h.status.last.ContainerStatuses[0]; !cs.Ready {
		t.Fatal("not ready after the readiness probe passed")
	}
}

func TestWorkerPostStartFailureKillsContainer(t *testing.T) {
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"false"}}}}
	})
	h := newHarness(t, pod)
	f := withFakeProbes(h)
	f.failHook = "a"
	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 0 {
		t.Fatalf("a container whose postStart failed runs: %v", got)
	}
	ev := h.events()
	for _, want := range []string{"Normal Started Container started", "Warning FailedPostStartHook hook of a failed", "Normal Killing FailedPostStartHook"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %q:\n%s", want, ev)
		}
	}
	if cs := h.status.last.ContainerStatuses[0]; cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonPostStartHookError {
		t.Errorf("state %+v, want waiting %s", cs.State, reasonPostStartHookError)
	}
}

func TestWorkerStopsSidecarsAfterAppsWithPreStop(t *testing.T) {
	pod := basePod(withSidecars("s1", "s2"), func(p *v1.Pod) {
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 1}}}
	})
	h := newHarness(t, pod)
	f := withFakeProbes(h)
	for range 3 {
		h.sync(pod, false)
	}
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 4 {
		t.Fatalf("running %v, want s1 s2 a b", got)
	}
	deleted := pod.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	h.sync(deleted, false)
	log := strings.Join(*f.log, " ")
	// a and b stop in parallel (a after its preStop), then s2, then s1.
	if !strings.HasSuffix(log, "stop:s2 stop:s1") || !strings.Contains(log, "preStop:a") ||
		strings.Index(log, "preStop:a") > strings.Index(log, "stop:a") || strings.Index(log, "stop:s2") < strings.Index(log, "stop:b") {
		t.Errorf("stop order %q, want apps (a after its preStop) then s2 then s1", log)
	}
	if !f.removed {
		t.Error("probes not stopped with the pod")
	}
}

func TestReadinessGateConditionWakesWorker(t *testing.T) {
	pod := basePod(func(p *v1.Pod) { p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "g"}} })
	w := &Worker{pod: pod, wake: make(chan struct{}, 1)}
	woken := func() bool {
		select {
		case <-w.wake:
			return true
		default:
			return false
		}
	}
	other := pod.DeepCopy()
	other.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue}}
	w.update(other, false)
	if woken() {
		t.Error("a status change the pod's readiness does not depend on woke the worker")
	}
	gated := other.DeepCopy()
	gated.Status.Conditions = append(gated.Status.Conditions, v1.PodCondition{Type: "g", Status: v1.ConditionTrue})
	w.update(gated, false)
	if !woken() {
		t.Error("the readiness gate's condition changed without waking the worker")
	}
}
