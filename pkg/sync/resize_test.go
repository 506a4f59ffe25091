package sync

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/allocation"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

func res(cpu, mem string) v1.ResourceRequirements {
	l := v1.ResourceList{}
	if cpu != "" {
		l[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[v1.ResourceMemory] = resource.MustParse(mem)
	}
	return v1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
}

func withResources(name string, r v1.ResourceRequirements, policy ...v1.ContainerResizePolicy) func(*v1.Pod) {
	return func(p *v1.Pod) {
		for i := range p.Spec.Containers {
			if p.Spec.Containers[i].Name == name {
				p.Spec.Containers[i].Resources = r
				p.Spec.Containers[i].ResizePolicy = policy
			}
		}
	}
}

func TestPlanResizes(t *testing.T) {
	running := &runtime.PodStatus{
		Sandboxes: []*runtime.SandboxStatus{{ID: "sb", Ready: true}},
		Containers: []*runtime.ContainerStatus{
			{ID: "a1", Name: "a", SandboxID: "sb", State: runtime.ContainerRunning},
			{ID: "b1", Name: "b", SandboxID: "sb", State: runtime.ContainerRunning},
		},
	}
	restartMem := v1.ContainerResizePolicy{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}
	tests := []struct {
		name                   string
		pod                    *v1.Pod
		plan                   podActions
		actuated               allocation.Containers
		wantResize             []string
		wantRestart, wantStart []string
	}{{
		name:     "nothing changed",
		pod:      basePod(withResources("a", res("100m", "64Mi"))),
		actuated: allocation.Containers{"a": res("100m", "64Mi"), "b": {}},
	}, {
		name:       "cpu up in place, memory down first",
		pod:        basePod(withResources("a", res("200m", "64Mi")), withResources("b", res("", "32Mi"))),
		actuated:   allocation.Containers{"a": res("100m", "64Mi"), "b": res("", "64Mi")},
		wantResize: []string{"b", "a"},
	}, {
		name:        "memory policy RestartContainer restarts on a memory change only",
		pod:         basePod(withResources("a", res("100m", "128Mi"), restartMem), withResources("b", res("300m", ""), restartMem)),
		actuated:    allocation.Containers{"a": res("100m", "64Mi"), "b": res("200m", "")},
		wantResize:  []string{"b"},
		wantRestart: []string{"a1"},
		wantStart:   []string{"a"},
	}, {
		name:     "no record: the container has what it was started with",
		pod:      basePod(withResources("a", res("200m", "64Mi"))),
		actuated: allocation.Containers{},
	}, {
		name:     "a container the plan kills anyway is not resized",
		pod:      basePod(withResources("a", res("200m", "64Mi"))),
		plan:     podActions{ContainersToKill: []string{"a1"}},
		actuated: allocation.Containers{"a": res("100m", "64Mi")},
	}, {
		name:     "nothing while the sandbox is replaced",
		pod:      basePod(withResources("a", res("200m", "64Mi"))),
		plan:     podActions{KillPod: true, CreateSandbox: true},
		actuated: allocation.Containers{"a": res("100m", "64Mi")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := tt.plan
			if !plan.CreateSandbox {
				plan.SandboxID = "sb"
			}
			planResizes(tt.pod, running, &plan, tt.actuated)
			var got []string
			for _, r := range plan.ContainersToResize {
				got = append(got, r.name)
			}
			if !slices.Equal(got, tt.wantResize) {
				t.Errorf("resized = %v, want %v", got, tt.wantResize)
			}
			if !slices.Equal(plan.ResizeRestarts, tt.wantRestart) {
				t.Errorf("restarted = %v, want %v", plan.ResizeRestarts, tt.wantRestart)
			}
			var started []string
			for _, i := range plan.ContainersToStart {
				started = append(started, tt.pod.Spec.Containers[i].Name)
			}
			if !slices.Equal(started, tt.wantStart) {
				t.Errorf("started = %v, want %v", started, tt.wantStart)
			}
		})
	}
}

// resizeHarness is a harness whose worker is registered with the
// Dispatcher (as admission would) and whose node has cpu of room.
func resizeHarness(t *testing.T, pod *v1.Pod, cpu string) *harness {
	t.Helper()
	h := newHarness(t, pod)
	h.d.cfg.Allocatable = func() v1.ResourceList {
		return v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("10")}
	}
	// Registered as admission would, without a goroutine of its own: the
	// test runs its passes.
	h.d.ctx = context.Background()
	h.d.mu.Lock()
	h.d.workers[pod.UID] = h.w
	h.d.mu.Unlock()
	if err := h.d.deps.alloc.SetAllocated(pod); err != nil {
		t.Fatal(err)
	}
	return h
}

// resize hands the pod's new spec to the Dispatcher and runs one pass of
// the worker on the pod as allocated.
func (h *harness) resize(pod *v1.Pod) *v1.Pod {
	h.t.Helper()
	h.d.UpsertPod(pod)
	allocated, _ := h.d.deps.alloc.Apply(pod)
	h.syncAllocated(allocated)
	return allocated
}

// syncAllocated runs one sync pass with the applied resources known, as
// the worker's run loop hands them in.
func (h *harness) syncAllocated(pod *v1.Pod) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.pleg.RelistSoon()
	observed, err := h.pleg.Cache().GetNewerThan(ctx, pod.UID, time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	h.w.pass(ctx, pod, false, observed)
}

func (h *harness) condition(t v1.PodConditionType) *v1.PodCondition {
	h.status.mu.Lock()
	defer h.status.mu.Unlock()
	for _, c := range h.status.last.Conditions {
		if c.Type == t {
			return &c
		}
	}
	return nil
}

func (h *harness) called(name string) int {
	h.rt.Lock()
	defer h.rt.Unlock()
	n := 0
	for _, c := range h.rt.Called {
		if c == name {
			n++
		}
	}
	return n
}

func TestResizeInPlace(t *testing.T) {
	pod := basePod(withResources("a", res("100m", "64Mi")))
	pod.Generation = 1
	h := resizeHarness(t, pod, "2")
	h.syncAllocated(pod)
	h.syncAllocated(pod)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 2 {
		t.Fatalf("running = %v", got)
	}
	if r, ok := h.d.deps.alloc.Actuated(pod.UID, "a"); !ok || !r.Limits.Cpu().Equal(resource.MustParse("100m")) {
		t.Fatalf("applied record at start = %v %v", r, ok)
	}
	h.events()

	bigger := basePod(withResources("a", res("500m", "64Mi")))
	bigger.Generation = 2
	allocated := h.resize(bigger)
	if n := h.called("UpdateContainerResources"); n != 1 {
		t.Fatalf("UpdateContainerResources called %d times, want 1", n)
	}
	if c := h.condition(v1.PodResizeInProgress); c == nil || c.ObservedGeneration != 2 {
		t.Errorf("in-progress condition while resizing = %+v", c)
	}
	h.syncAllocated(allocated)
	if c := h.condition(v1.PodResizeInProgress); c != nil {
		t.Errorf("in-progress condition after the resize = %+v", c)
	}
	if n := h.called("UpdateContainerResources"); n != 1 {
		t.Errorf("a done resize was applied again: %d calls", n)
	}
	h.status.mu.Lock()
	st := h.status.last
	h.status.mu.Unlock()
	var cs *v1.ContainerStatus
	for i := range st.ContainerStatuses {
		if st.ContainerStatuses[i].Name == "a" {
			cs = &st.ContainerStatuses[i]
		}
	}
	if cs == nil || cs.Resources == nil || !cs.Resources.Limits.Cpu().Equal(resource.MustParse("500m")) ||
		!cs.AllocatedResources.Cpu().Equal(resource.MustParse("500m")) || cs.RestartCount != 0 {
		t.Errorf("status of the resized container = %+v", cs)
	}
	ev := h.events()
	for _, want := range []string{"Normal ResizeStarted Pod resize started: ", `"generation":2`, "Normal ResizeCompleted Pod resize completed"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %q:\n%s", want, ev)
		}
	}
}

func TestResizeRestartContainerPolicy(t *testing.T) {
	restart := v1.ContainerResizePolicy{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}
	pod := basePod(withResources("a", res("100m", "64Mi"), restart))
	h := resizeHarness(t, pod, "2")
	h.syncAllocated(pod)
	h.syncAllocated(pod)
	h.events()

	allocated := h.resize(basePod(withResources("a", res("100m", "128Mi"), restart)))
	if n := h.called("UpdateContainerResources"); n != 0 {
		t.Errorf("a RestartContainer resize was applied in place (%d calls)", n)
	}
	h.syncAllocated(allocated)
	h.status.mu.Lock()
	st := h.status.last
	h.status.mu.Unlock()
	for _, cs := range st.ContainerStatuses {
		want := int32(0)
		if cs.Name == "a" {
			want = 1
		}
		if cs.RestartCount != want || cs.State.Running == nil {
			t.Errorf("container %s: restartCount %d running %v, want %d and running", cs.Name, cs.RestartCount, cs.State.Running != nil, want)
		}
	}
	if ev := h.events(); !strings.Contains(ev, "Container a resize requires restart") {
		t.Errorf("events lack the restart:\n%s", ev)
	}
}

func TestResizeDeferredUntilRoom(t *testing.T) {
	pod := basePod(withResources("a", res("500m", "64Mi")))
	pod.Generation = 1
	h := resizeHarness(t, pod, "1")
	h.syncAllocated(pod)
	h.events()

	tooBig := basePod(withResources("a", res("2", "64Mi")))
	tooBig.Generation = 2
	allocated := h.resize(tooBig)
	if !allocated.Spec.Containers[0].Resources.Limits.Cpu().Equal(resource.MustParse("500m")) {
		t.Fatalf("a resize with no room was allocated: %v", allocated.Spec.Containers[0].Resources)
	}
	c := h.condition(v1.PodResizePending)
	if c == nil || c.Reason != v1.PodReasonDeferred || !strings.Contains(c.Message, "Node didn't have enough resource: cpu") || c.ObservedGeneration != 2 {
		t.Fatalf("pending condition = %+v", c)
	}
	if ev := h.events(); !strings.Contains(ev, "Warning ResizeDeferred Pod resize Deferred: ") {
		t.Errorf("events lack ResizeDeferred:\n%s", ev)
	}
	// The node grows: the next judgment allocates it.
	h.d.cfg.Allocatable = func() v1.ResourceList {
		return v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("10")}
	}
	h.d.judgeResizes(context.Background())
	allocated, _ = h.d.deps.alloc.Apply(tooBig)
	h.syncAllocated(allocated)
	if c := h.condition(v1.PodResizePending); c != nil {
		t.Errorf("pending condition after room was made = %+v", c)
	}
	if n := h.called("UpdateContainerResources"); n != 1 {
		t.Errorf("UpdateContainerResources called %d times, want 1", n)
	}
}

// An idle dispatcher wakes for its look for orphans, twice a minute; a
// resize that waits for room has it judge every second.
func TestDispatcherTicksEverySecondOnlyForWaitingResizes(t *testing.T) {
	pod := basePod(withResources("a", res("500m", "64Mi")))
	pod.Generation = 1
	h := resizeHarness(t, pod, "1")
	h.syncAllocated(pod)
	h.d.cfg.SourceSynced = func() bool { return true }
	scanned := h.d.cfg.Clock.Now()
	if got := h.d.tickWait(scanned); got <= orphanScanPeriod-time.Second || got > orphanScanPeriod {
		t.Errorf("idle: waits %v after a scan, want the scan period %v", got, orphanScanPeriod)
	}
	if got := h.d.tickWait(scanned.Add(-orphanScanPeriod)); got != time.Second {
		t.Errorf("idle with a scan due: waits %v, want a second", got)
	}
	tooBig := basePod(withResources("a", res("2", "64Mi")))
	tooBig.Generation = 2
	h.resize(tooBig)
	select {
	case <-h.d.resizeWake:
	default:
		t.Error("a deferred resize did not wake the dispatcher's loop")
	}
	if got := h.d.tickWait(scanned); got != time.Second {
		t.Errorf("with a deferred resize: waits %v, want a second", got)
	}
}

func TestResizeSurvivesAgentRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := allocation.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	pod := basePod(withResources("a", res("500m", "64Mi")))
	if err := s.SetAllocated(pod); err != nil {
		t.Fatal(err)
	}
	if err := s.SetActuated(pod.UID, "a", res("500m", "64Mi")); err != nil {
		t.Fatal(err)
	}
	s2, err := allocation.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := basePod(withResources("a", res("1", "64Mi")))
	got, pendingResize := s2.Apply(want)
	if !pendingResize || !got.Spec.Containers[0].Resources.Limits.Cpu().Equal(resource.MustParse("500m")) {
		t.Errorf("reopened allocation = %v (resize pending %v), want the allocated 500m", got.Spec.Containers[0].Resources, pendingResize)
	}
	if r, ok := s2.Actuated(pod.UID, "a"); !ok || !r.Limits.Cpu().Equal(resource.MustParse("500m")) {
		t.Errorf("reopened applied record = %v %v", r, ok)
	}
}
