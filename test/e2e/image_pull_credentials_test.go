//go:build e2e

package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// createRegistrySecret makes a dockerconfigjson secret with the protected
// registry's credentials, removed when the test ends.
func createRegistrySecret(t *testing.T) *corev1.Secret {
	t.Helper()
	cs := framework.Client(t)
	ctx := framework.Context(t, 30*time.Second)
	auth := base64.StdEncoding.EncodeToString([]byte(harness.RegistryUser + ":" + harness.RegistryPass))
	cfg, err := json.Marshal(map[string]any{"auths": map[string]any{harness.AuthRegistry: map[string]string{"auth": auth}}})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := cs.CoreV1().Secrets(podNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "regcred-"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create secret: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Secrets(podNS).Delete(framework.Context(t, 30*time.Second), secret.Name, metav1.DeleteOptions{})
	})
	return secret
}

// TestPresentPrivateImageNeedsCredentials: KubeletEnsureSecretPulledImages
// is on by default in 1.37, with the NeverVerifyPreloadedImages policy. An
// image the agent pulled with one pod's secret is not handed, through
// IfNotPresent, to a pod without it: that pod's image goes through a pull
// without credentials, which the registry refuses. A pod with the same
// secret uses the image present, without a pull, as on a kubelet node
// (the secret matches the recorded one).
func TestPresentPrivateImageNeedsCredentials(t *testing.T) {
	t.Parallel()
	image := harness.AuthRegistry + "/e2e-test-images/busybox:" + harness.BusyboxE2ETag
	secret := createRegistrySecret(t)

	// Always, so that this pod's pull (and its record) happens even if
	// the image is on the node already, pulled around the agent.
	owner := imagePod("creds-owner", image, corev1.PullAlways)
	owner.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret.Name}}
	owner = waitPod(t, createPod(t, owner), 2*time.Minute, runningAndReady)
	framework.Eventually(t, 30*time.Second, func() error {
		if ev := podEvents(t, owner); !hasEvent(ev, "Pulled", "Successfully pulled image") {
			return fmt.Errorf("the pod with the secret shows no pull:\n%s", eventSummary(ev))
		}
		return nil
	})

	// The same image on the same node, without the secret.
	stranger := imagePod("creds-stranger", image, corev1.PullIfNotPresent)
	stranger.Spec.NodeName = owner.Spec.NodeName
	stranger = createPod(t, stranger)
	got := waitingReasons(t, stranger, 2*time.Minute, "ErrImagePull", "ImagePullBackOff")
	if got.Status.Phase != corev1.PodPending {
		t.Errorf("pod without the secret: phase %s, want Pending", got.Status.Phase)
	}
	ev := podEvents(t, stranger)
	if !hasEvent(ev, "Pulling", "Pulling image") || !hasEvent(ev, "Failed", "Failed to pull image") {
		t.Errorf("pod without the secret: want a refused pull attempt, events:\n%s", eventSummary(ev))
	}
	if hasEvent(ev, "Pulled", "already present on machine") {
		t.Errorf("pod without the secret was handed the present image, events:\n%s", eventSummary(ev))
	}

	// The same secret again: the image as it is, no pull.
	friend := imagePod("creds-friend", image, corev1.PullIfNotPresent)
	friend.Spec.NodeName = owner.Spec.NodeName
	friend.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret.Name}}
	friend = waitPod(t, createPod(t, friend), 2*time.Minute, runningAndReady)
	framework.Eventually(t, 30*time.Second, func() error {
		ev := podEvents(t, friend)
		if !hasEvent(ev, "Pulled", "already present on machine and can be accessed by the pod") {
			return fmt.Errorf("pod with the secret: no \"already present\" event:\n%s", eventSummary(ev))
		}
		if hasEvent(ev, "Pulling", "Pulling image") {
			return fmt.Errorf("pod with the secret pulled again:\n%s", eventSummary(ev))
		}
		return nil
	})
}
