package sync

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// addEphemeral is what the ephemeralcontainers subresource does to a pod.
func addEphemeral(pod *v1.Pod, ec v1.EphemeralContainer) *v1.Pod {
	p := pod.DeepCopy()
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, ec)
	p.Generation++
	return p
}

func (h *harness) containerID(name string) string {
	h.rt.Lock()
	defer h.rt.Unlock()
	for id, c := range h.rt.Containers {
		if c.Metadata.Name == name {
			return id
		}
	}
	return ""
}

func TestWorkerStartsEphemeralContainerOnce(t *testing.T) {
	pod := basePod()
	h := newHarness(t, pod)
	rec, _ := withInputs(h)
	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 2 {
		t.Fatalf("running = %v, want a and b", got)
	}

	pod = addEphemeral(pod, v1.EphemeralContainer{TargetContainerName: "a",
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: "busybox", Stdin: true, TTY: true}})
	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 3 {
		t.Fatalf("after adding an ephemeral container running = %v, want a, b and debugger", got)
	}
	rec.mu.Lock()
	cfg := rec.configs["debugger"]
	rec.mu.Unlock()
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetPid() != runtimeapi.NamespaceMode_TARGET || ns.GetTargetId() != h.containerID("a") {
		t.Errorf("pid namespace = %v target %q, want TARGET %q", ns.GetPid(), ns.GetTargetId(), h.containerID("a"))
	}
	if !cfg.Tty || !cfg.Stdin {
		t.Errorf("tty/stdin not passed: tty=%v stdin=%v", cfg.Tty, cfg.Stdin)
	}
	if ev := h.events(); !strings.Contains(ev, "Normal Started Container started") {
		t.Errorf("no Started event:\n%s", ev)
	}

	h.sync(pod, false)
	st := h.status.last
	if len(st.EphemeralContainerStatuses) != 1 {
		t.Fatalf("ephemeralContainerStatuses = %+v, want one", st.EphemeralContainerStatuses)
	}
	ecs := st.EphemeralContainerStatuses[0]
	if ecs.Name != "debugger" || ecs.State.Running == nil || ecs.RestartCount != 0 || ecs.Ready || ecs.Started != nil ||
		ecs.ContainerID != "fake://"+h.containerID("debugger") {
		t.Errorf("ephemeral status = %+v, want debugger running, not ready, no started, restartCount 0", ecs)
	}
	if st.Phase != v1.PodRunning || len(st.ContainerStatuses) != 2 {
		t.Errorf("phase %s with %d container statuses, want Running with 2", st.Phase, len(st.ContainerStatuses))
	}

	h.exit("debugger", 1)
	h.sync(pod, false)
	h.sync(pod, false)
	if n := len(h.rt.Containers); n != 3 {
		t.Errorf("containers = %d after the ephemeral container exited, want 3: it is never run again", n)
	}
	ecs = h.status.last.EphemeralContainerStatuses[0]
	if ecs.State.Terminated == nil || ecs.State.Terminated.ExitCode != 1 || ecs.RestartCount != 0 {
		t.Errorf("ephemeral status after exit = %+v, want terminated with exit code 1, restartCount 0", ecs.State)
	}
	if h.status.last.Phase != v1.PodRunning {
		t.Errorf("phase = %s after the ephemeral container exited, want Running", h.status.last.Phase)
	}
}

func TestWorkerEphemeralImagePullFailure(t *testing.T) {
	pod := basePod()
	h := newHarness(t, pod)
	h.sync(pod, false)
	pod = addEphemeral(pod, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: "example.com/missing:1"}})
	h.img.InjectError("PullImage", errors.New("not found"))
	h.sync(pod, false)
	ecs := h.status.last.EphemeralContainerStatuses[0]
	if ecs.State.Waiting == nil || ecs.State.Waiting.Reason != reasonErrImagePull {
		t.Errorf("ephemeral state = %+v, want waiting ErrImagePull", ecs.State)
	}
	if h.status.last.Phase != v1.PodRunning {
		t.Errorf("phase = %s, want Running: an ephemeral container does not hold the pod", h.status.last.Phase)
	}
	if id := h.containerID("debugger"); id != "" {
		t.Errorf("ephemeral container created without its image")
	}
}

func TestWorkerEphemeralTargetMissing(t *testing.T) {
	pod := basePod()
	h := newHarness(t, pod)
	h.sync(pod, false)
	pod = addEphemeral(pod, v1.EphemeralContainer{TargetContainerName: "nope",
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}})
	h.sync(pod, false)
	ecs := h.status.last.EphemeralContainerStatuses[0]
	if ecs.State.Waiting == nil || ecs.State.Waiting.Reason != reasonConfigError ||
		!strings.Contains(ecs.State.Waiting.Message, "unable to find target container nope") {
		t.Errorf("ephemeral state = %+v, want waiting CreateContainerConfigError naming the target", ecs.State)
	}
}
