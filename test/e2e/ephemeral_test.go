//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// addEphemeral adds an ephemeral container to a pod through the pods/ephemeralcontainers
// subresource, as `kubectl debug` does.
func addEphemeral(t *testing.T, pod *corev1.Pod, ec corev1.EphemeralContainer) {
	t.Helper()
	pods := framework.Client(t).CoreV1().Pods(pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(framework.Context(t, 30*time.Second), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.EphemeralContainers = append(cur.Spec.EphemeralContainers, ec)
		_, err = pods.UpdateEphemeralContainers(framework.Context(t, 30*time.Second), pod.Name, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("add ephemeral container %s: %v", ec.Name, err)
	}
}

func ephemeralStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.EphemeralContainerStatuses {
		if p.Status.EphemeralContainerStatuses[i].Name == name {
			return &p.Status.EphemeralContainerStatuses[i]
		}
	}
	return nil
}

// ephemeralIs waits for an ephemeral container's status to pass check; the pod must stay
// running and ready throughout: ephemeral containers count for neither.
func ephemeralIs(name string, check func(cs *corev1.ContainerStatus) error) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		if err := runningAndReady(p); err != nil {
			return err
		}
		cs := ephemeralStatus(p, name)
		if cs == nil {
			return fmt.Errorf("no ephemeral status for %s: %s", name, describeStatuses(p.Status.EphemeralContainerStatuses))
		}
		return check(cs)
	}
}

func ephemeralRunning(cs *corev1.ContainerStatus) error {
	if cs.State.Running == nil {
		return fmt.Errorf("%s not running: %s", cs.Name, describeStatuses([]corev1.ContainerStatus{*cs}))
	}
	return nil
}

// containersNamed lists the runtime's containers of one name in a pod.
func containersNamed(t *testing.T, uid, name string) []*runtimeapi.Container {
	t.Helper()
	rt, _ := framework.CRI(t)
	resp, err := rt.ListContainers(framework.Context(t, 30*time.Second), &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{
			"io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": name}},
	})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	return resp.Containers
}

// TestEphemeralContainers: ephemeral containers added to a running pod through the
// ephemeralcontainers subresource run once each, are reported in
// status.ephemeralContainerStatuses without touching the pod's readiness, can be exec'ed
// into and logged, see their target's processes when they have one, are never restarted
// after they exit, and stop with the pod.
func TestEphemeralContainers(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := busyboxPod("ephemeral", corev1.RestartPolicyAlways, "")
	pod.Spec.Containers[0].Command = []string{"/bin/sleep", "10000"}
	pod = createPod(t, pod)
	pod = waitPod(t, pod, 2*time.Minute, runningAndReady)
	if pod.Generation != 1 {
		t.Errorf("generation of a new pod = %d, want 1", pod.Generation)
	}

	// A debugger of its own: its own PID namespace, a terminal, output in its logs.
	addEphemeral(t, pod, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debugger", Image: harness.BusyboxImage, Stdin: true, TTY: true,
		Command: []string{"sh", "-c", "while true; do echo polo; sleep 2; done"},
	}})
	got := waitPod(t, pod, 2*time.Minute, ephemeralIs("debugger", ephemeralRunning))
	cs := ephemeralStatus(got, "debugger")
	if !strings.HasPrefix(cs.ContainerID, "containerd://") || cs.ImageID == "" || !strings.Contains(cs.Image, "busybox") ||
		cs.RestartCount != 0 || cs.Ready {
		t.Errorf("ephemeral status %+v, want a containerd ID, image and image ID, no restarts, not ready", *cs)
	}
	if got.Generation != 2 || got.Status.ObservedGeneration != 2 {
		t.Errorf("generation %d observedGeneration %d, want 2 and 2", got.Generation, got.Status.ObservedGeneration)
	}
	if len(got.Status.ContainerStatuses) != 1 {
		t.Errorf("containerStatuses = %s, want only main", describeStatuses(got.Status.ContainerStatuses))
	}
	if out := framework.Kubectl(t, "exec", "-n", pod.Namespace, pod.Name, "-c", "debugger", "--", "echo", "marco"); !strings.Contains(out, "marco") {
		t.Errorf("kubectl exec -c debugger -- echo marco = %q", out)
	}
	framework.Eventually(t, time.Minute, func() error {
		out, err := framework.KubectlErr(t, "logs", "-n", pod.Namespace, pod.Name, "-c", "debugger")
		if err != nil {
			return err
		}
		return expect(strings.Contains(out, "polo"), "logs of debugger = %q, want polo", out)
	})
	if out := framework.Kubectl(t, "exec", "-n", pod.Namespace, pod.Name, "-c", "debugger", "--", "ps", "-o", "args"); strings.Contains(out, "sleep 10000") {
		t.Errorf("a debugger without a target sees the pod's other processes:\n%s", out)
	}

	// One that exits: it stays terminated and is never run again.
	addEphemeral(t, pod, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "oneshot", Image: harness.BusyboxImage, Command: []string{"sh", "-c", "echo bye; exit 3"},
	}})
	got = waitPod(t, pod, 2*time.Minute, ephemeralIs("oneshot", func(cs *corev1.ContainerStatus) error {
		if t := cs.State.Terminated; t == nil || t.ExitCode != 3 || t.Reason != "Error" {
			return fmt.Errorf("oneshot not terminated with exit code 3: %s", describeStatuses([]corev1.ContainerStatus{*cs}))
		}
		return nil
	}))
	oneshotID := ephemeralStatus(got, "oneshot").ContainerID

	// One through kubectl debug --target: it shares the target's PID namespace and sees
	// its sleep.
	framework.Kubectl(t, "debug", "-n", pod.Namespace, pod.Name, "--image="+harness.BusyboxImage,
		"--target=main", "-c", "targeted", "--", "sleep", "3600")
	waitPod(t, pod, 2*time.Minute, ephemeralIs("targeted", ephemeralRunning))
	framework.Eventually(t, 30*time.Second, func() error {
		out, err := framework.KubectlErr(t, "exec", "-n", pod.Namespace, pod.Name, "-c", "targeted", "--", "ps", "-o", "pid,args")
		if err != nil {
			return err
		}
		return expect(strings.Contains(out, "sleep 10000") && strings.Contains(out, "sleep 3600"),
			"ps in the targeted container = %q, want the target's sleep 10000 beside its own sleep 3600", out)
	})
	out := framework.Kubectl(t, "exec", "-n", pod.Namespace, pod.Name, "-c", "targeted", "--", "sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '")
	if !strings.Contains(out, "sleep 10000") {
		t.Errorf("/proc/1 of the targeted container is %q, want the target's sleep 10000", out)
	}

	// By now the agent has synced the pod several times since oneshot exited.
	got = waitPod(t, pod, 30*time.Second, ephemeralIs("oneshot", func(cs *corev1.ContainerStatus) error {
		if cs.State.Terminated == nil || cs.ContainerID != oneshotID || cs.RestartCount != 0 {
			return fmt.Errorf("oneshot changed after it exited: %s (ID %s, was %s)", describeStatuses([]corev1.ContainerStatus{*cs}), cs.ContainerID, oneshotID)
		}
		return nil
	}))
	if n := len(containersNamed(t, string(pod.UID), "oneshot")); n != 1 {
		t.Errorf("the runtime holds %d containers of oneshot, want 1: an ephemeral container is never restarted", n)
	}
	if n := len(got.Status.EphemeralContainerStatuses); n != 3 {
		t.Errorf("ephemeralContainerStatuses = %s, want 3", describeStatuses(got.Status.EphemeralContainerStatuses))
	}

	// An image that cannot be pulled: the usual waiting reasons.
	addEphemeral(t, pod, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "unpullable", Image: harness.RegistryAddr + "/nodeagent/never-existed:1",
	}})
	seen := map[string]bool{}
	waitPod(t, pod, 2*time.Minute, ephemeralIs("unpullable", func(cs *corev1.ContainerStatus) error {
		if w := cs.State.Waiting; w != nil {
			seen[w.Reason] = true
		}
		return expect(seen["ImagePullBackOff"], "unpullable waiting reasons seen %v, want ImagePullBackOff", seen)
	}))

	// Deleting the pod stops its ephemeral containers with it.
	if err := framework.Client(t).CoreV1().Pods(pod.Namespace).Delete(framework.Context(t, 30*time.Second), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	framework.Eventually(t, time.Minute, func() error {
		for _, name := range []string{"debugger", "targeted"} {
			for _, c := range containersNamed(t, string(pod.UID), name) {
				if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
					return fmt.Errorf("%s still running after the pod's deletion", name)
				}
			}
		}
		return nil
	})
}
