//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

func execProbe(period int32, cmd ...string) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: cmd}}, PeriodSeconds: period, FailureThreshold: 1}
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// TestProbeHandlers: each handler kind, as a readiness probe, succeeding on
// one container and failing on another; the pod is not Ready, its message
// names exactly the failing ones, and each failure gives an Unhealthy event
// in the kubelet's words.
func TestProbeHandlers(t *testing.T) {
	t.Parallel()
	withProbe := func(c corev1.Container, h corev1.ProbeHandler) corev1.Container {
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: h, PeriodSeconds: 2, TimeoutSeconds: 1, FailureThreshold: 1}
		return c
	}
	agnhost := func(name string, args ...string) corev1.Container {
		return corev1.Container{Name: name, Image: harness.AgnhostImage, Args: args}
	}
	notServing := "grpc-bad"
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "probes-", Namespace: podNS},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{
			withProbe(corev1.Container{Name: "http-ok", Image: harness.AgnhostImage, Args: []string{"netexec", "--http-port=8080", "--udp-port=-1"},
				Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080}}},
				corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/hostname", Port: intstr.FromString("web"),
					HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}}}}),
			withProbe(sleeper("http-bad"), corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8081)}}),
			withProbe(sleeper("tcp-ok"), corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}),
			withProbe(sleeper("tcp-bad"), corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8082)}}),
			withProbe(sleeper("exec-ok"), corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}),
			withProbe(sleeper("exec-bad"), corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo nope; exit 1"}}}),
			withProbe(sleeper("exec-slow"), corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "30"}}}),
			withProbe(agnhost("grpc-ok", "grpc-health-checking", "--port=5000", "--http-port=8091"),
				corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 5000}}),
			withProbe(agnhost(notServing, "grpc-health-checking", "--port=5001", "--http-port=8092", "--delay-unhealthy-sec=0"),
				corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 5001}}),
		}},
	}
	pod = createPod(t, pod)
	ok := []string{"http-ok", "tcp-ok", "exec-ok", "grpc-ok"}
	bad := []string{"http-bad", "tcp-bad", "exec-bad", "exec-slow", notServing}
	got := waitPod(t, pod, 3*time.Minute, func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("not running: %s", describeStatuses(p.Status.ContainerStatuses))
		}
		for _, n := range ok {
			if cs := containerStatus(p, n); cs == nil || !cs.Ready {
				return fmt.Errorf("%s not ready", n)
			}
		}
		return nil
	})
	for _, n := range bad {
		if cs := containerStatus(got, n); cs == nil || cs.Ready || cs.State.Running == nil || cs.Started == nil || !*cs.Started {
			t.Errorf("%s: %+v, want running, started, not ready", n, cs)
		}
	}
	c := podCondition(got, corev1.PodReady)
	want := "containers with unready status: [http-bad tcp-bad exec-bad exec-slow grpc-bad]"
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" || c.Message != want {
		t.Errorf("Ready condition %+v, want False, ContainersNotReady, %q", c, want)
	}
	if c := podCondition(got, corev1.ContainersReady); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("ContainersReady %+v, want False", c)
	}
	framework.Eventually(t, time.Minute, func() error {
		ev := podEvents(t, pod)
		for _, w := range []struct{ container, msg string }{
			{"http-bad", "Readiness probe failed: Get \"http://" + got.Status.PodIP + ":8081/\": dial tcp " + got.Status.PodIP + ":8081: connect: connection refused"},
			{"tcp-bad", "Readiness probe failed: dial tcp " + got.Status.PodIP + ":8082: connect: connection refused"},
			{"exec-bad", "Readiness probe failed: nope"},
			{"exec-slow", `Readiness probe failed: command "sleep 30" timed out`},
			{notServing, `Readiness probe failed: service unhealthy (responded with "NOT_SERVING")`},
		} {
			found := false
			for _, e := range ev {
				if e.Reason == "Unhealthy" && e.Type == corev1.EventTypeWarning && e.InvolvedObject.FieldPath == "spec.containers{"+w.container+"}" && strings.HasPrefix(e.Message, w.msg) {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("no Unhealthy event %q for %s in:\n%s", w.msg, w.container, eventSummary(ev))
			}
		}
		return nil
	})
}

// TestLivenessProbeRestarts: a container whose liveness probe fails is
// killed with the probe's own grace period (not the pod's ten minutes)
// and restarted; restarts are counted and the events tell why.
func TestLivenessProbeRestarts(t *testing.T) {
	t.Parallel()
	pod := busyboxPod("liveness", corev1.RestartPolicyAlways, "touch /tmp/healthy; sleep 4; rm /tmp/healthy; sleep 3600")
	podGrace, probeGrace := int64(600), int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &podGrace
	pod.Spec.Containers[0].LivenessProbe = execProbe(1, "cat", "/tmp/healthy")
	pod.Spec.Containers[0].LivenessProbe.TerminationGracePeriodSeconds = &probeGrace
	pod = createPod(t, pod)
	waitPod(t, pod, 2*time.Minute, func(p *corev1.Pod) error {
		if cs := containerStatus(p, "main"); cs == nil || cs.RestartCount < 2 {
			return fmt.Errorf("containers %s, want two restarts", describeStatuses(p.Status.ContainerStatuses))
		}
		return nil
	})
	framework.Eventually(t, 30*time.Second, func() error {
		ev := podEvents(t, pod)
		if !hasEvent(ev, "Unhealthy", "Liveness probe failed: cat: can't open '/tmp/healthy': No such file or directory") ||
			!hasEvent(ev, "Killing", "Container main failed liveness probe, will be restarted") {
			return fmt.Errorf("events:\n%s", eventSummary(ev))
		}
		return nil
	})
}

// TestStartupProbeHoldsOffLiveness: a liveness probe that would fail at
// once does not run until the startup probe has passed; the container
// then counts as started and is never restarted.
func TestStartupProbeHoldsOffLiveness(t *testing.T) {
	t.Parallel()
	pod := busyboxPod("startup", corev1.RestartPolicyAlways, "sleep 6; touch /tmp/started; sleep 3600")
	c := &pod.Spec.Containers[0]
	c.StartupProbe = execProbe(1, "test", "-f", "/tmp/started")
	c.StartupProbe.FailureThreshold = 60
	c.LivenessProbe = execProbe(1, "test", "-f", "/tmp/started")
	pod = createPod(t, pod)
	sawUnstarted := false
	got := waitPod(t, pod, 2*time.Minute, func(p *corev1.Pod) error {
		cs := containerStatus(p, "main")
		if cs != nil && cs.State.Running != nil && cs.Started != nil && !*cs.Started {
			sawUnstarted = true
		}
		return runningAndReady(p)
	})
	if cs := containerStatus(got, "main"); cs.RestartCount != 0 || !*cs.Started {
		t.Errorf("container %+v, want started without restarts", cs)
	}
	if !sawUnstarted {
		t.Error("never saw the container running but not yet started")
	}
	if ev := podEvents(t, pod); hasEvent(ev, "Killing", "") || hasEvent(ev, "Unhealthy", "Liveness") {
		t.Errorf("liveness ran before startup passed:\n%s", eventSummary(ev))
	}
}

// TestReadinessTogglesPodReady: a readiness probe that passes and fails in
// turn takes the pod in and out of Ready, as a watch on the API shows.
func TestReadinessTogglesPodReady(t *testing.T) {
	t.Parallel()
	pod := busyboxPod("readiness", corev1.RestartPolicyAlways, "while true; do touch /tmp/ready; sleep 5; rm -f /tmp/ready; sleep 5; done")
	pod.Spec.Containers[0].ReadinessProbe = execProbe(1, "test", "-f", "/tmp/ready")
	pod = createPod(t, pod)
	ctx := framework.Context(t, 2*time.Minute)
	w, err := framework.Client(t).CoreV1().Pods(podNS).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var seen []corev1.ConditionStatus
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		c := podCondition(p, corev1.PodReady)
		if c == nil {
			continue
		}
		if cs := containerStatus(p, "main"); cs != nil && cs.Ready != (c.Status == corev1.ConditionTrue) {
			t.Errorf("container ready %v but pod Ready %s", cs.Ready, c.Status)
		}
		if len(seen) == 0 || seen[len(seen)-1] != c.Status {
			seen = append(seen, c.Status)
		}
		// False (starting), True, False, True.
		if len(seen) >= 4 {
			break
		}
	}
	want := []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionTrue}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("Ready went %v, want %v", seen, want)
	}
}

// TestFailingPostStartHook: a container whose postStart hook fails is
// killed and never reported running; the event says why.
func TestFailingPostStartHook(t *testing.T) {
	t.Parallel()
	pod := busyboxPod("poststart", corev1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo broken; exit 3"}}}}
	pod = createPod(t, pod)
	waitPod(t, pod, 2*time.Minute, func(p *corev1.Pod) error {
		cs := containerStatus(p, "main")
		if cs == nil || cs.RestartCount < 1 {
			return fmt.Errorf("containers %s, want a restart", describeStatuses(p.Status.ContainerStatuses))
		}
		if cs.State.Running != nil || cs.Ready {
			return fmt.Errorf("container reported running: %s", describeStatuses(p.Status.ContainerStatuses))
		}
		return nil
	})
	framework.Eventually(t, 30*time.Second, func() error {
		ev := podEvents(t, pod)
		if !hasEvent(ev, "FailedPostStartHook", `Exec lifecycle hook ([sh -c echo broken; exit 3]) for Container "main" in Pod "`+pod.Name+"_"+podNS) ||
			!hasEvent(ev, "FailedPostStartHook", `message: "broken\n"`) {
			return fmt.Errorf("events:\n%s", eventSummary(ev))
		}
		return nil
	})
}

// TestSidecarJobWithHooks: a sidecar (restartable init container) starts,
// and passes its startup probe, before the app; it serves the app while
// the app runs; the pod succeeds when the app exits although the sidecar
// never does; the agent then stops the sidecar, preStop first. The
// sidecar's log shows its hooks in order: postStart, preStop, SIGTERM.
func TestSidecarJobWithHooks(t *testing.T) {
	t.Parallel()
	always := corev1.ContainerRestartPolicyAlways
	grace := int64(10)
	hook := func(msg string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo " + msg + " > /proc/1/fd/1"}}}
	}
	pod := createPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "sidecar-", Namespace: podNS},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			InitContainers: []corev1.Container{{
				Name: "side", Image: harness.BusyboxImage, RestartPolicy: &always,
				Command: []string{"sh", "-c", "trap 'echo sigterm; exit 0' TERM; echo served > /tmp/index.html; " +
					"httpd -p 8080 -h /tmp; while true; do sleep 0.2; done"},
				StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/index.html", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1, FailureThreshold: 30},
				Lifecycle: &corev1.Lifecycle{PostStart: hook("poststart"), PreStop: hook("prestop")},
			}},
			Containers: []corev1.Container{{
				Name: "app", Image: harness.BusyboxImage,
				Command: []string{"sh", "-c", "wget -q -O- http://127.0.0.1:8080/index.html && sleep 3 && wget -q -O- http://127.0.0.1:8080/index.html"},
			}},
		},
	})
	got := waitPod(t, pod, 3*time.Minute, phaseIs(corev1.PodSucceeded))
	app, side := containerStatus(got, "app"), containerStatus(got, "side")
	if app == nil || app.State.Terminated == nil || app.State.Terminated.ExitCode != 0 {
		t.Fatalf("app %+v, want exited 0 (the sidecar served it)", app)
	}
	if side == nil || side.State.Terminated == nil {
		t.Fatalf("sidecar %+v, want stopped", side)
	}
	// Times are in whole seconds: equal is fine, reversed is not. (The
	// app's success already shows the sidecar served it from its start.)
	if app.State.Terminated.StartedAt.Before(&side.State.Terminated.StartedAt) {
		t.Errorf("sidecar started at %v, app at %v: want the sidecar first", side.State.Terminated.StartedAt, app.State.Terminated.StartedAt)
	}
	if side.State.Terminated.FinishedAt.Before(&app.State.Terminated.FinishedAt) {
		t.Errorf("sidecar finished at %v, app at %v: want the app first", side.State.Terminated.FinishedAt, app.State.Terminated.FinishedAt)
	}
	rt, _ := framework.CRI(t)
	id := strings.TrimPrefix(side.State.Terminated.ContainerID, "containerd://")
	st, err := rt.ContainerStatus(framework.Context(t, 30*time.Second), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("sidecar status: %v", err)
	}
	raw, err := os.ReadFile(st.GetStatus().GetLogPath())
	if err != nil {
		t.Fatalf("sidecar log: %v", err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if f := strings.SplitN(l, " ", 4); len(f) == 4 {
			lines = append(lines, f[3])
		}
	}
	if got := strings.Join(lines, ","); got != "poststart,prestop,sigterm" {
		t.Errorf("sidecar log %q, want poststart,prestop,sigterm", got)
	}
}

// TestReadinessGate: a pod whose readiness gate's condition is missing is
// not Ready, for that reason; once someone else sets the condition True
// (as a load balancer controller would), the agent makes the pod Ready.
func TestReadinessGate(t *testing.T) {
	t.Parallel()
	const gate = "example.com/load-balancer"
	pod := busyboxPod("gate", corev1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
	pod = createPod(t, pod)
	waitPod(t, pod, 2*time.Minute, func(p *corev1.Pod) error {
		c := podCondition(p, corev1.PodReady)
		cr := podCondition(p, corev1.ContainersReady)
		want := `corresponding condition of pod readiness gate "` + gate + `" does not exist.`
		if cr == nil || cr.Status != corev1.ConditionTrue || c == nil || c.Status != corev1.ConditionFalse || c.Reason != "ReadinessGatesNotReady" || c.Message != want {
			return fmt.Errorf("ContainersReady %+v, Ready %+v", cr, c)
		}
		return nil
	})
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True"}]}}`, gate)
	if _, err := framework.Client(t).CoreV1().Pods(podNS).Patch(framework.Context(t, 30*time.Second), pod.Name,
		types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("set the gate's condition: %v", err)
	}
	waitPod(t, pod, time.Minute, runningAndReady)
}

// TestHookOrderInSharedEmptyDir: the hooks and the process of a container
// write into an emptyDir shared with a second container. Its liveness
// probe fails after a while, so the agent kills it, preStop first, and
// starts it again. The file shows: postStart, then preStop, then the
// process's SIGTERM handler, then the next instance's postStart.
func TestHookOrderInSharedEmptyDir(t *testing.T) {
	t.Parallel()
	grace := int64(10)
	write := func(msg string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo " + msg + " >> /shared/log"}}}
	}
	shared := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	pod := createPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "hooks-", Namespace: podNS},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Volumes:                       []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{
				{
					Name: "app", Image: harness.BusyboxImage, VolumeMounts: shared,
					Command: []string{"sh", "-c", "trap 'echo sigterm >> /shared/log; exit 0' TERM; sleep 4; touch /tmp/unwell; " +
						"while true; do sleep 0.2; done"},
					Lifecycle:     &corev1.Lifecycle{PostStart: write("poststart"), PreStop: write("prestop")},
					LivenessProbe: execProbe(1, "sh", "-c", "test ! -f /tmp/unwell"),
				},
				sleeper("reader", shared...),
			},
		},
	})
	got := waitPod(t, pod, 2*time.Minute, func(p *corev1.Pod) error {
		if cs := containerStatus(p, "app"); cs == nil || cs.RestartCount < 1 || cs.State.Running == nil {
			return fmt.Errorf("containers %s, want app restarted once and running", describeStatuses(p.Status.ContainerStatuses))
		}
		return nil
	})
	reader := containerStatus(got, "reader")
	rt, _ := framework.CRI(t)
	framework.Eventually(t, 30*time.Second, func() error {
		resp, err := rt.ExecSync(framework.Context(t, 30*time.Second), &runtimeapi.ExecSyncRequest{
			ContainerId: strings.TrimPrefix(reader.ContainerID, "containerd://"), Cmd: []string{"cat", "/shared/log"}, Timeout: 10})
		if err != nil {
			return err
		}
		lines := strings.Fields(string(resp.Stdout))
		if len(lines) < 4 || strings.Join(lines[:4], ",") != "poststart,prestop,sigterm,poststart" {
			return fmt.Errorf("shared log %q, want poststart,prestop,sigterm,poststart", lines)
		}
		return nil
	})
}
