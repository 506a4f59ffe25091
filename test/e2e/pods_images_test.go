//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// imagePod is a pod of one container of image, sleeping.
func imagePod(prefix, image string, policy corev1.PullPolicy) *corev1.Pod {
	pod := busyboxPod(prefix, corev1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.Containers[0].Image = image
	pod.Spec.Containers[0].ImagePullPolicy = policy
	return pod
}

// waitingReasons follows the pod's container and returns once every reason in want has
// been seen as its waiting reason, in that order.
func waitingReasons(t *testing.T, pod *corev1.Pod, timeout time.Duration, want ...string) *corev1.Pod {
	t.Helper()
	next := 0
	return waitPod(t, pod, timeout, func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 1 {
			if w := p.Status.ContainerStatuses[0].State.Waiting; w != nil && next < len(want) && w.Reason == want[next] {
				next++
			}
		}
		if next < len(want) {
			return fmt.Errorf("waiting for reason %s; containers %s", want[next], describeStatuses(p.Status.ContainerStatuses))
		}
		return nil
	})
}

// TestImagePullErrors: the image failures users see on a kubelet node.
func TestImagePullErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		image   string
		policy  corev1.PullPolicy
		reasons []string
	}{
		{name: "never-existing image", image: harness.RegistryAddr + "/nodeagent/never-existed:1", policy: corev1.PullIfNotPresent, reasons: []string{"ErrImagePull", "ImagePullBackOff"}},
		{name: "protected registry without a secret", image: harness.AuthRegistry + "/e2e-test-images/busybox:" + harness.BusyboxE2ETag, policy: corev1.PullAlways, reasons: []string{"ErrImagePull", "ImagePullBackOff"}},
		{name: "absent with pull policy Never", image: harness.RegistryAddr + "/nodeagent/absent:1", policy: corev1.PullNever, reasons: []string{"ErrImageNeverPull"}},
		{name: "invalid name", image: "NotAValid:Image", policy: corev1.PullIfNotPresent, reasons: []string{"InvalidImageName"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := createPod(t, imagePod("image", tc.image, tc.policy))
			got := waitingReasons(t, pod, 2*time.Minute, tc.reasons...)
			if got.Status.Phase != corev1.PodPending {
				t.Errorf("phase %s, want Pending", got.Status.Phase)
			}
			if c := podCondition(got, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" {
				t.Errorf("Ready = %+v, want False ContainersNotReady", c)
			}
		})
	}
}

// TestPullSecretOpensProtectedRegistry: the pod's imagePullSecrets reach the runtime.
func TestPullSecretOpensProtectedRegistry(t *testing.T) {
	t.Parallel()
	secret := createRegistrySecret(t)
	pod := imagePod("secret", harness.AuthRegistry+"/e2e-test-images/busybox:"+harness.BusyboxE2ETag, corev1.PullAlways)
	pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret.Name}}
	pod = createPod(t, pod)
	waitPod(t, pod, 2*time.Minute, runningAndReady)
	framework.Eventually(t, 30*time.Second, func() error {
		ev := podEvents(t, pod)
		if !hasEvent(ev, "Pulling", "Pulling image") || !hasEvent(ev, "Pulled", "Successfully pulled image") {
			return fmt.Errorf("no Pulling/Pulled events:\n%s", eventSummary(ev))
		}
		return nil
	})
}
