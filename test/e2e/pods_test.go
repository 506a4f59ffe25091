//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

const podNS = "default"

// busyboxPod is a one-container pod running script in busybox's sh.
func busyboxPod(prefix string, policy corev1.RestartPolicy, script string) *corev1.Pod {
	grace := int64(5)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Namespace: podNS},
		Spec: corev1.PodSpec{
			RestartPolicy:                 policy,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "main", Image: harness.BusyboxImage, Command: []string{"sh", "-c", script},
			}},
		},
	}
}

// createPod creates pod and force-deletes it when the test ends.
func createPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	cs := framework.Client(t)
	created, err := cs.CoreV1().Pods(pod.Namespace).Create(framework.Context(t, 30*time.Second), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = cs.CoreV1().Pods(created.Namespace).Delete(context.Background(), created.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return created
}

// waitPod polls the pod until check accepts it, and returns it.
func waitPod(t *testing.T, pod *corev1.Pod, timeout time.Duration, check func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	framework.Eventually(t, timeout, func() error {
		p, err := framework.Client(t).CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got = p
		if err := check(p); err != nil {
			return fmt.Errorf("pod %s (phase %s): %w", p.Name, p.Status.Phase, err)
		}
		return nil
	})
	return got
}

func phaseIs(want corev1.PodPhase) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		if p.Status.Phase != want {
			return fmt.Errorf("phase %s, want %s; containers %s", p.Status.Phase, want, describeStatuses(p.Status.ContainerStatuses))
		}
		return nil
	}
}

func runningAndReady(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("phase %s, want Running; containers %s", p.Status.Phase, describeStatuses(p.Status.ContainerStatuses))
	}
	if c := podCondition(p, corev1.PodReady); c == nil || c.Status != corev1.ConditionTrue {
		return fmt.Errorf("Ready = %+v", c)
	}
	return nil
}

func describeStatuses(list []corev1.ContainerStatus) string {
	var out []string
	for _, cs := range list {
		s := "?"
		switch {
		case cs.State.Waiting != nil:
			s = "waiting " + cs.State.Waiting.Reason + " " + cs.State.Waiting.Message
		case cs.State.Running != nil:
			s = "running"
		case cs.State.Terminated != nil:
			s = fmt.Sprintf("terminated %s %d", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		}
		out = append(out, fmt.Sprintf("%s: %s (restarts %d)", cs.Name, s, cs.RestartCount))
	}
	return "[" + strings.Join(out, "; ") + "]"
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// sandboxesOf lists the runtime's sandboxes of a pod, by the kubelet's pod UID label.
func sandboxesOf(t *testing.T, uid string) []*runtimeapi.PodSandbox {
	t.Helper()
	rt, _ := framework.CRI(t)
	resp, err := rt.ListPodSandbox(framework.Context(t, 30*time.Second), &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}},
	})
	if err != nil {
		t.Fatalf("list sandboxes: %v", err)
	}
	return resp.Items
}

// podEvents returns the reasons of the pod's events, with their messages.
func podEvents(t *testing.T, pod *corev1.Pod) []corev1.Event {
	t.Helper()
	list, err := framework.Client(t).CoreV1().Events(pod.Namespace).List(framework.Context(t, 30*time.Second), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(pod.UID)).String(),
	})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	return list.Items
}

func hasEvent(events []corev1.Event, reason, msgPart string) bool {
	for _, e := range events {
		if e.Reason == reason && strings.Contains(e.Message, msgPart) {
			return true
		}
	}
	return false
}

func eventSummary(events []corev1.Event) string {
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprintf("%s %s (%s): %s", e.Type, e.Reason, e.Source.Component, e.Message))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestPodRunsWithTruthfulStatus: a busybox pod goes Pending → Running, and its status
// carries what the kubelet reports: conditions, IPs, the container's state and identity.
func TestPodRunsWithTruthfulStatus(t *testing.T) {
	t.Parallel()
	pod := createPod(t, busyboxPod("run", corev1.RestartPolicyAlways, "sleep 3600"))
	got := waitPod(t, pod, 2*time.Minute, runningAndReady)

	st := got.Status
	if st.HostIP != harness.NodeIP || len(st.HostIPs) == 0 || st.HostIPs[0].IP != harness.NodeIP {
		t.Errorf("hostIP %q hostIPs %v, want %s", st.HostIP, st.HostIPs, harness.NodeIP)
	}
	if !strings.HasPrefix(st.PodIP, "10.244.") || len(st.PodIPs) == 0 || st.PodIPs[0].IP != st.PodIP {
		t.Errorf("podIP %q podIPs %v, want an address of the pod CIDR", st.PodIP, st.PodIPs)
	}
	if st.StartTime == nil || st.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("startTime %v qosClass %q, want set and BestEffort", st.StartTime, st.QOSClass)
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if c := podCondition(got, typ); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("condition %s = %+v, want True", typ, c)
		}
	}
	if len(st.ContainerStatuses) != 1 {
		t.Fatalf("containerStatuses = %+v", st.ContainerStatuses)
	}
	cs := st.ContainerStatuses[0]
	if cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() || !cs.Ready || cs.Started == nil || !*cs.Started || cs.RestartCount != 0 {
		t.Errorf("container status %+v, want running, ready, started, no restarts", cs)
	}
	if !strings.HasPrefix(cs.ContainerID, "containerd://") || cs.ImageID == "" || !strings.Contains(cs.Image, "busybox") {
		t.Errorf("containerID %q imageID %q image %q", cs.ContainerID, cs.ImageID, cs.Image)
	}
	sbs := sandboxesOf(t, string(pod.UID))
	if len(sbs) != 1 || sbs[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandboxes of the pod: %v, want one ready", sbs)
	}
	framework.Eventually(t, 30*time.Second, func() error {
		ev := podEvents(t, pod)
		for _, want := range []string{"Pulled", "Created", "Started"} {
			if !hasEvent(ev, want, "") {
				return fmt.Errorf("no %s event; events:\n%s", want, eventSummary(ev))
			}
		}
		for _, e := range ev {
			if e.Reason == "Started" && (e.Source.Component != "kubelet" || e.InvolvedObject.FieldPath != "spec.containers{main}") {
				return fmt.Errorf("Started event from %q about %q, want kubelet and spec.containers{main}", e.Source.Component, e.InvolvedObject.FieldPath)
			}
		}
		return nil
	})
}

// TestPodDeleteHonoursGracePeriod: kubectl delete stops the container within the pod's
// grace period — a container that ignores SIGTERM is killed when it runs out — and the
// pod object and its sandbox are gone afterwards.
func TestPodDeleteHonoursGracePeriod(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		script   string
		wantExit int32
		minTime  time.Duration
		maxTime  time.Duration
	}{
		// PID 1 ignores SIGTERM without a handler: killed after the 5 s grace.
		{name: "ignores SIGTERM", script: "sleep 3600", wantExit: 137, minTime: 4 * time.Second, maxTime: 20 * time.Second},
		{name: "exits on SIGTERM", script: "trap 'exit 0' TERM; while true; do sleep 0.2; done", wantExit: 0, maxTime: 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := createPod(t, busyboxPod("grace", corev1.RestartPolicyAlways, tc.script))
			waitPod(t, pod, 2*time.Minute, runningAndReady)
			cs := framework.Client(t)
			ctx := framework.Context(t, 2*time.Minute)
			w, err := cs.CoreV1().Pods(podNS).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String()})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			start := time.Now()
			framework.Kubectl(t, "delete", "pod", "-n", podNS, pod.Name, "--wait=false")
			var last *corev1.Pod
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok {
					last = p
				}
				if ev.Type == watch.Deleted {
					break
				}
			}
			took := time.Since(start)
			if last == nil || len(last.Status.ContainerStatuses) != 1 {
				t.Fatalf("no final status seen: %+v", last)
			}
			term := last.Status.ContainerStatuses[0].State.Terminated
			if term == nil || term.ExitCode != tc.wantExit {
				t.Errorf("final container state %+v, want terminated with exit code %d", last.Status.ContainerStatuses[0].State, tc.wantExit)
			}
			if took < tc.minTime || took > tc.maxTime {
				t.Errorf("pod gone after %s, want between %s and %s", took, tc.minTime, tc.maxTime)
			}
			if _, err := cs.CoreV1().Pods(podNS).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("pod still there after its deletion: %v", err)
			}
			if sbs := sandboxesOf(t, string(pod.UID)); len(sbs) != 0 {
				t.Errorf("sandboxes left after deletion: %v", sbs)
			}
			if !hasEvent(podEvents(t, pod), "Killing", "Stopping container main") {
				t.Errorf("no Killing event:\n%s", eventSummary(podEvents(t, pod)))
			}
		})
	}
}

// TestRestartPolicyDecidesPhase: each restart policy and exit code ends in the phase and
// container state the kubelet reports.
func TestRestartPolicyDecidesPhase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		policy    corev1.RestartPolicy
		exit      int
		phase     corev1.PodPhase
		restarted bool // the container must have been restarted at least once
	}{
		{name: "Never exit 0", policy: corev1.RestartPolicyNever, exit: 0, phase: corev1.PodSucceeded},
		{name: "Never exit 3", policy: corev1.RestartPolicyNever, exit: 3, phase: corev1.PodFailed},
		{name: "OnFailure exit 0", policy: corev1.RestartPolicyOnFailure, exit: 0, phase: corev1.PodSucceeded},
		{name: "OnFailure exit 2", policy: corev1.RestartPolicyOnFailure, exit: 2, phase: corev1.PodRunning, restarted: true},
		{name: "Always exit 0", policy: corev1.RestartPolicyAlways, exit: 0, phase: corev1.PodRunning, restarted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := createPod(t, busyboxPod("policy", tc.policy, fmt.Sprintf("sleep 1; exit %d", tc.exit)))
			got := waitPod(t, pod, 2*time.Minute, func(p *corev1.Pod) error {
				if err := phaseIs(tc.phase)(p); err != nil {
					return err
				}
				if len(p.Status.ContainerStatuses) != 1 {
					return fmt.Errorf("no container status")
				}
				cs := p.Status.ContainerStatuses[0]
				if tc.restarted && cs.RestartCount < 1 {
					return fmt.Errorf("not restarted yet: %s", describeStatuses(p.Status.ContainerStatuses))
				}
				if !tc.restarted && cs.State.Terminated == nil {
					return fmt.Errorf("not terminated yet: %s", describeStatuses(p.Status.ContainerStatuses))
				}
				return nil
			})
			cs := got.Status.ContainerStatuses[0]
			term := cs.State.Terminated
			if tc.restarted {
				term = cs.LastTerminationState.Terminated
			}
			wantReason := "Completed"
			if tc.exit != 0 {
				wantReason = "Error"
			}
			if term == nil || term.ExitCode != int32(tc.exit) || term.Reason != wantReason || term.FinishedAt.Before(&term.StartedAt) {
				t.Errorf("terminated state %+v, want exit %d reason %s", term, tc.exit, wantReason)
			}
			if !tc.restarted {
				if c := podCondition(got, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse {
					t.Errorf("Ready of an ended pod: %+v", c)
				}
				framework.Eventually(t, 30*time.Second, func() error {
					for _, sb := range sandboxesOf(t, string(pod.UID)) {
						if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
							return fmt.Errorf("the sandbox of an ended pod still runs")
						}
					}
					return nil
				})
			}
		})
	}
}

// TestInitContainersRunInOrder: two init containers run one after the other, each to
// success, before the app container; the conditions follow.
func TestInitContainersRunInOrder(t *testing.T) {
	t.Parallel()
	pod := busyboxPod("init", corev1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "first", Image: harness.BusyboxImage, Command: []string{"sh", "-c", "sleep 2"}},
		{Name: "second", Image: harness.BusyboxImage, Command: []string{"sh", "-c", "sleep 1"}},
	}
	pod = createPod(t, pod)
	sawPending := false
	got := waitPod(t, pod, 2*time.Minute, func(p *corev1.Pod) error {
		if p.Status.Phase == corev1.PodPending && len(p.Status.InitContainerStatuses) == 2 {
			if c := podCondition(p, corev1.PodInitialized); c != nil && c.Status == corev1.ConditionFalse && c.Reason == "ContainersNotInitialized" {
				sawPending = true
			}
		}
		return runningAndReady(p)
	})
	if !sawPending {
		t.Errorf("never saw the pod Pending with Initialized=False ContainersNotInitialized")
	}
	if len(got.Status.InitContainerStatuses) != 2 {
		t.Fatalf("initContainerStatuses: %+v", got.Status.InitContainerStatuses)
	}
	first, second := got.Status.InitContainerStatuses[0].State.Terminated, got.Status.InitContainerStatuses[1].State.Terminated
	if first == nil || second == nil || first.ExitCode != 0 || second.ExitCode != 0 || first.Reason != "Completed" {
		t.Fatalf("init containers did not both complete: %s", describeStatuses(got.Status.InitContainerStatuses))
	}
	if second.StartedAt.Before(&first.FinishedAt) {
		t.Errorf("second init container started at %s, before the first finished at %s", second.StartedAt, first.FinishedAt)
	}
	app := got.Status.ContainerStatuses[0].State.Running
	if app == nil || app.StartedAt.Before(&second.FinishedAt) {
		t.Errorf("app container %+v started before the init containers finished (%s)", app, second.FinishedAt)
	}
	initd, ready := podCondition(got, corev1.PodInitialized), podCondition(got, corev1.PodReady)
	if initd == nil || ready == nil || initd.Status != corev1.ConditionTrue || ready.LastTransitionTime.Before(&initd.LastTransitionTime) {
		t.Errorf("Initialized %+v must be True no later than Ready %+v", initd, ready)
	}
}

// TestCrashingContainerBacksOff: a container that keeps failing is restarted with growing
// delays and reported as CrashLoopBackOff, with its last termination kept.
func TestCrashingContainerBacksOff(t *testing.T) {
	t.Parallel()
	pod := createPod(t, busyboxPod("crash", corev1.RestartPolicyAlways, "exit 1"))
	starts := map[int32]time.Time{} // restartCount → when that attempt started
	sawBackOff := false
	waitPod(t, pod, 3*time.Minute, func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("no container status")
		}
		cs := p.Status.ContainerStatuses[0]
		// restartCount numbers the newest attempt: running or just ended, it is the
		// current state; waiting to restart, it is the last termination.
		switch lt := cs.LastTerminationState.Terminated; {
		case cs.State.Running != nil:
			starts[cs.RestartCount] = cs.State.Running.StartedAt.Time
			if lt != nil && cs.RestartCount > 0 {
				starts[cs.RestartCount-1] = lt.StartedAt.Time
			}
		case cs.State.Terminated != nil:
			starts[cs.RestartCount] = cs.State.Terminated.StartedAt.Time
		case lt != nil:
			starts[cs.RestartCount] = lt.StartedAt.Time
		}
		if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			sawBackOff = true
			if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 {
				return fmt.Errorf("CrashLoopBackOff without the last termination: %+v", cs.LastTerminationState)
			}
		}
		if cs.RestartCount < 4 || !sawBackOff || len(starts) < 4 {
			return fmt.Errorf("restarts %d, back-off seen %t, attempts seen %d", cs.RestartCount, sawBackOff, len(starts))
		}
		return nil
	})
	// Attempts 0 and 1 are back to back; then the delays are 10 s and 20 s.
	gap1, gap2 := starts[2].Sub(starts[1]), starts[3].Sub(starts[2])
	if gap1 < 9*time.Second || gap2 < 19*time.Second || gap2 < gap1 {
		t.Errorf("restart gaps %s then %s, want ≥10s then ≥20s (attempts %v)", gap1, gap2, starts)
	}
	if !hasEvent(podEvents(t, pod), "BackOff", "Back-off restarting failed container main") {
		t.Errorf("no BackOff event:\n%s", eventSummary(podEvents(t, pod)))
	}
}

// TestActiveDeadlineFailsPod: a pod running past activeDeadlineSeconds is stopped and
// failed with reason DeadlineExceeded.
func TestActiveDeadlineFailsPod(t *testing.T) {
	t.Parallel()
	pod := busyboxPod("deadline", corev1.RestartPolicyAlways, "sleep 3600")
	deadline := int64(5)
	pod.Spec.ActiveDeadlineSeconds = &deadline
	pod = createPod(t, pod)
	got := waitPod(t, pod, 2*time.Minute, phaseIs(corev1.PodFailed))
	if got.Status.Reason != "DeadlineExceeded" {
		t.Errorf("reason %q message %q, want DeadlineExceeded", got.Status.Reason, got.Status.Message)
	}
	if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil {
		t.Errorf("container of a failed pod not terminated: %s", describeStatuses(got.Status.ContainerStatuses))
	}
	if got.Status.StartTime == nil || time.Since(got.Status.StartTime.Time) < 5*time.Second {
		t.Errorf("failed before its deadline: started %v", got.Status.StartTime)
	}
}

// TestImageChangeReplacesContainer: changing a running container's image replaces that
// container (restartCount 1, a new container ID, the new image), as on a kubelet.
func TestImageChangeReplacesContainer(t *testing.T) {
	t.Parallel()
	pod := createPod(t, busyboxPod("setimage", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; while true; do sleep 0.2; done"))
	before := waitPod(t, pod, 2*time.Minute, runningAndReady).Status.ContainerStatuses[0]
	// agnhost, not the e2e busybox: the harness's busybox images are one image under two
	// names, which the runtime reports by either.
	framework.Kubectl(t, "set", "image", "-n", podNS, "pod/"+pod.Name, "main="+harness.AgnhostImage)
	after := waitPod(t, pod, 2*time.Minute, func(p *corev1.Pod) error {
		if err := runningAndReady(p); err != nil {
			return err
		}
		if cs := p.Status.ContainerStatuses[0]; cs.RestartCount != 1 {
			return fmt.Errorf("not replaced yet: %s", describeStatuses(p.Status.ContainerStatuses))
		}
		return nil
	}).Status.ContainerStatuses[0]
	if after.ContainerID == before.ContainerID || !strings.Contains(after.Image, "agnhost") {
		t.Errorf("after the image change: container %s image %s (before %s %s)", after.ContainerID, after.Image, before.ContainerID, before.Image)
	}
	if lt := after.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 0 {
		t.Errorf("last state %+v, want the old container ended by SIGTERM with exit 0", after.LastTerminationState)
	}
}
