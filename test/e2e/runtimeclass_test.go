//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// createRuntimeClass creates a RuntimeClass of handler and deletes it when the test ends;
// it returns its name.
func createRuntimeClass(t *testing.T, prefix, handler string) string {
	t.Helper()
	classes := framework.Client(t).NodeV1().RuntimeClasses()
	rc, err := classes.Create(framework.Context(t, 30*time.Second), &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}, Handler: handler,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create RuntimeClass of handler %s: %v", handler, err)
	}
	t.Cleanup(func() { _ = classes.Delete(context.Background(), rc.Name, metav1.DeleteOptions{}) })
	return rc.Name
}

// sandboxFailures sums up the pod's FailedCreatePodSandBox events whose message holds
// want: how many sandbox creations failed so, and when the first and the last did.
func sandboxFailures(events []corev1.Event, want string) (tries int, first, last time.Time) {
	for _, e := range events {
		if e.Reason != "FailedCreatePodSandBox" || !strings.Contains(e.Message, want) {
			continue
		}
		tries += max(int(e.Count), 1)
		if f := e.FirstTimestamp.Time; !f.IsZero() && (first.IsZero() || f.Before(first)) {
			first = f
		}
		if l := e.LastTimestamp.Time; l.After(last) {
			last = l
		}
	}
	return tries, first, last
}

// TestRuntimeClassHandlers: a pod's runtimeClassName picks the runtime handler its sandbox
// runs under, as on a kubelet node. A RuntimeClass whose handler the runtime has runs the
// pod under that handler; one whose handler the runtime lacks leaves the pod Pending, its
// container waiting in ContainerCreating, with the runtime's refusal in
// FailedCreatePodSandBox events, tried again after a back-off rather than at once.
func TestRuntimeClassHandlers(t *testing.T) {
	t.Parallel()
	known := createRuntimeClass(t, "e2e-known", harness.TestRuntimeHandler)
	unknown := createRuntimeClass(t, "e2e-unknown", "no-such-handler")

	t.Run("handler the runtime has", func(t *testing.T) {
		t.Parallel()
		pod := busyboxPod("runtimeclass-known", corev1.RestartPolicyAlways, "sleep 3600")
		pod.Spec.RuntimeClassName = &known
		pod = createPod(t, pod)
		waitPod(t, pod, 2*time.Minute, runningAndReady)
		sandboxes := sandboxesOf(t, string(pod.UID))
		if len(sandboxes) != 1 || sandboxes[0].RuntimeHandler != harness.TestRuntimeHandler {
			var handlers []string
			for _, sb := range sandboxes {
				handlers = append(handlers, fmt.Sprintf("%s:%q", sb.Id, sb.RuntimeHandler))
			}
			t.Errorf("sandboxes %v, want one under runtime handler %q", handlers, harness.TestRuntimeHandler)
		}
	})

	t.Run("handler the runtime lacks", func(t *testing.T) {
		t.Parallel()
		pod := busyboxPod("runtimeclass-unknown", corev1.RestartPolicyAlways, "sleep 3600")
		pod.Spec.RuntimeClassName = &unknown
		pod = createPod(t, pod)
		// containerd's words, in 1.6 as in 2.x.
		const refusal = `no runtime for "no-such-handler" is configured`

		// The runtime's refusal, then a second try: the kubelet backs off 10 s (plus
		// jitter) after a failed sync; an agent retrying at once would show many tries at
		// once. (Should the agent's watch not have brought the new RuntimeClass yet, the
		// first failure says it is not found: that one does not count.)
		var events []corev1.Event
		framework.Eventually(t, 2*time.Minute, func() error {
			events = podEvents(t, pod)
			if tries, _, _ := sandboxFailures(events, refusal); tries < 2 {
				return fmt.Errorf("%d sandbox creations refused with %q, want 2; events:\n%s", tries, refusal, eventSummary(events))
			}
			return nil
		})
		tries, first, last := sandboxFailures(events, refusal)
		if gap := last.Sub(first); gap < time.Duration(tries-1)*5*time.Second {
			t.Errorf("%d sandbox creations within %s, want them at least 5 s apart (a back-off)", tries, gap)
		}

		got := waitPod(t, pod, 30*time.Second, func(p *corev1.Pod) error {
			if p.Status.Phase != corev1.PodPending {
				return fmt.Errorf("phase %s, want Pending", p.Status.Phase)
			}
			if len(p.Status.ContainerStatuses) != 1 {
				return fmt.Errorf("containers %s, want main", describeStatuses(p.Status.ContainerStatuses))
			}
			if w := p.Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" {
				return fmt.Errorf("containers %s, want main waiting in ContainerCreating", describeStatuses(p.Status.ContainerStatuses))
			}
			return nil
		})
		if c := podCondition(got, corev1.PodReadyToStartContainers); c == nil || c.Status != corev1.ConditionFalse {
			t.Errorf("PodReadyToStartContainers = %+v, want False", c)
		}
		if sandboxes := sandboxesOf(t, string(pod.UID)); len(sandboxes) != 0 {
			t.Errorf("%d sandboxes in the runtime, want none", len(sandboxes))
		}
	})
}
