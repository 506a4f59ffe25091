//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestAdmissionRejectsUntoleratedNoExecuteTaint is not parallel: it taints the shared node
// NoExecute for a moment, which would evict other tests' pods. A pod bound straight to the
// node that does not tolerate the taint is rejected (TaintToleration) and nothing of it is
// created; one that tolerates it runs.
func TestAdmissionRejectsUntoleratedNoExecuteTaint(t *testing.T) {
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 3*time.Minute)
	const key = "nodeagent.test/admission"
	taint := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":"x","effect":"NoExecute"}]}}`, key)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, harness.NodeName, types.StrategicMergePatchType, []byte(taint), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Errorf("read node to untaint: %v", err)
			return
		}
		var keep []corev1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != key {
				keep = append(keep, tn)
			}
		}
		n.Spec.Taints = keep
		if _, err := cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Errorf("untaint node: %v", err)
		}
	})

	rejected := createPod(t, boundPod(sleepPod("untolerated", corev1.ResourceRequirements{})))
	tolerating := sleepPod("tolerating", corev1.ResourceRequirements{})
	tolerating.Spec.Tolerations = []corev1.Toleration{{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	tolerating = createPod(t, boundPod(tolerating))

	// The taint manager may delete the rejected pod soon after; the event stays.
	const want = "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
	framework.Eventually(t, time.Minute, func() error {
		if ev := podEvents(t, rejected); !hasEvent(ev, "TaintToleration", want) {
			return fmt.Errorf("no TaintToleration event; events:\n%s", eventSummary(ev))
		}
		return nil
	})
	if p, err := cs.CoreV1().Pods(podNS).Get(ctx, rejected.Name, metav1.GetOptions{}); err == nil && p.Status.Phase != corev1.PodPending {
		if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "TaintToleration" {
			t.Errorf("rejected pod: phase %s reason %q, want Failed TaintToleration", p.Status.Phase, p.Status.Reason)
		}
	}
	if sbs := sandboxesOf(t, string(rejected.UID)); len(sbs) != 0 {
		t.Errorf("the rejected pod got %d sandboxes", len(sbs))
	}
	waitPod(t, tolerating, 2*time.Minute, runningAndReady)
}
