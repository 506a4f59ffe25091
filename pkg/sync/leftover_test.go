package sync

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// leaveCreated runs the first pass of a one-container pod with the start
// refused, which leaves the container created as an agent killed between
// create and start would, and returns its ID.
func leaveCreated(t *testing.T, h *harness, pod *v1.Pod) string {
	t.Helper()
	h.rt.InjectError("StartContainer", errors.New("agent killed"))
	h.sync(pod, false)
	h.rt.Lock()
	defer h.rt.Unlock()
	if len(h.rt.Containers) != 1 {
		t.Fatalf("containers after the first pass: %d, want 1", len(h.rt.Containers))
	}
	for id, c := range h.rt.Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Fatalf("container %s is %s, want created", id, c.State)
		}
		return id
	}
	return ""
}

// restartedAfterLeftCreated is a one-container pod whose container an
// agent killed between create and start left created, and a new agent's
// worker for it, which knows nothing of the failed start.
func restartedAfterLeftCreated(t *testing.T) (*harness, *v1.Pod, string) {
	t.Helper()
	pod := basePod(func(p *v1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] })
	h := newHarness(t, pod)
	id := leaveCreated(t, h, pod)
	h.events()
	h.w = h.d.newWorker(pod)
	return h, pod, id
}

func TestRestartedAgentStartsContainerLeftCreated(t *testing.T) {
	h, pod, id := restartedAfterLeftCreated(t)
	h.sync(pod, false)
	h.rt.Lock()
	n, c := len(h.rt.Containers), h.rt.Containers[id]
	h.rt.Unlock()
	if n != 1 || c == nil || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after the restart: %d containers, the one left created is %+v; want it alone and running", n, c)
	}
	h.sync(pod, false) // the status reported is of what a pass found
	cs := h.status.last.ContainerStatuses[0]
	if cs.State.Running == nil || cs.RestartCount != 0 || cs.LastTerminationState != (v1.ContainerState{}) {
		t.Errorf("status = %+v, want running, restartCount 0, no last state", cs)
	}
	ev := h.events()
	if !strings.Contains(ev, "Normal Started Container started") || strings.Contains(ev, "Created") {
		t.Errorf("events = %q, want Started and no new Created", ev)
	}
}

func TestFailedStartIsReplacedNotRetried(t *testing.T) {
	pod := basePod(func(p *v1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] })
	h := newHarness(t, pod)
	id := leaveCreated(t, h, pod)
	cs := h.status.last.ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonStartError {
		t.Fatalf("status after the failed start = %+v, want waiting %s", cs.State, reasonStartError)
	}

	// The same agent: its own failed start is no leftover to start again.
	h.sync(pod, false)
	h.rt.Lock()
	var running []string
	for cid, c := range h.rt.Containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running = append(running, cid)
		}
	}
	_, stale := h.rt.Containers[id]
	h.rt.Unlock()
	if stale || len(running) != 1 || running[0] == id {
		t.Fatalf("after the retry: running %v, the failed one still there: %t; want a new one running and the failed one removed", running, stale)
	}
	if len(h.w.state.failedStarts) != 0 {
		t.Errorf("failed starts still recorded after the container's removal: %v", h.w.state.failedStarts)
	}
}

// TestStartRacingAKilledAgentsStartWaits: the new agent's start of a
// container left created meets the killed agent's start still under way in
// the runtime. That is no failed start: no StartError, no Failed event, and
// the container is not replaced once the runtime shows it running.
func TestStartRacingAKilledAgentsStartWaits(t *testing.T) {
	h, pod, id := restartedAfterLeftCreated(t)
	h.rt.InjectError("StartContainer", errors.New(`rpc error: code = Unknown desc = failed to set starting state for container "`+id+`": container is already in starting state`))
	h.sync(pod, false)
	if len(h.w.state.failedStarts) != 0 {
		t.Fatalf("failed starts recorded for a start under way elsewhere: %v", h.w.state.failedStarts)
	}
	if ev := h.events(); strings.Contains(ev, "Failed") {
		t.Errorf("events = %q, want no Failed", ev)
	}
	if w := h.status.last.ContainerStatuses[0].State.Waiting; w != nil && w.Reason == reasonStartError {
		t.Errorf("status waiting %+v, want no %s", w, reasonStartError)
	}

	// The earlier start ends: the container runs, and is kept.
	h.rt.Lock()
	h.rt.Containers[id].State = runtimeapi.ContainerState_CONTAINER_RUNNING
	h.rt.Unlock()
	h.sync(pod, false)
	h.rt.Lock()
	n, c := len(h.rt.Containers), h.rt.Containers[id]
	h.rt.Unlock()
	if n != 1 || c == nil || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after the earlier start ended: %d containers, the one left created is %+v; want it alone and running", n, c)
	}
}
