package sync

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodeagent/nodeagent/pkg/pullrecords"
)

// TestPresentImageNeedsThePullingCredentials: an image one pod pulled with
// its secret is not handed to a pod without it; that pod's pull goes to
// the registry with its own (no) credentials. A pod with the secret uses
// the image as it is.
func TestPresentImageNeedsThePullingCredentials(t *testing.T) {
	const image = "registry.example/private:1"
	podOf := func(uid string, policy v1.PullPolicy, secret bool) *v1.Pod {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "ns", UID: types.UID(uid)},
			Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways,
				Containers: []v1.Container{{Name: "a", Image: image, ImagePullPolicy: policy}}},
		}
		if secret {
			p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		}
		return p
	}
	first := podOf("with-secret", v1.PullAlways, true)
	h := newHarness(t, first)
	h.img.SetFakeImages(nil)
	h.w.deps.secrets = secretOf{&v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "regcred", UID: "secret-uid"},
		Type:       v1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example":{"username":"u","password":"p"}}}`)}}}
	policy, err := pullrecords.NewPolicy(kubeletv1beta1.NeverVerifyPreloadedImages, nil)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	tracker, err := pullrecords.Open(context.Background(), pullrecords.Config{RootDir: root, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	h.w.deps.pullRecords = tracker
	run := func(pod *v1.Pod) (pulls int, events string) {
		t.Helper()
		before := h.pullCalls()
		h.w = h.d.newWorker(pod)
		h.sync(pod, false)
		return h.pullCalls() - before, h.events()
	}

	if n, ev := run(first); n != 1 {
		t.Fatalf("the first pod pulled %d times, want once:\n%s", n, ev)
	}

	// Without the secret: a pull, which the registry refuses.
	h.img.InjectError("PullImage", errors.New("401 Unauthorized"))
	stranger := podOf("no-secret", v1.PullIfNotPresent, false)
	n, ev := run(stranger)
	if n != 1 {
		t.Errorf("the pod without the secret pulled %d times, want once:\n%s", n, ev)
	}
	if w := waitingOf(h, "a"); w == nil || w.Reason != reasonErrImagePull {
		t.Errorf("waiting = %+v, want ErrImagePull", w)
	}
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_CREATED); len(got) != 0 {
		t.Errorf("containers created from the image: %v", got)
	}
	if strings.Contains(ev, "already present") {
		t.Errorf("the image was shown as present to the pod without the secret:\n%s", ev)
	}

	// Under Never it is as absent.
	n, ev = run(podOf("never", v1.PullNever, false))
	if w := waitingOf(h, "a"); n != 0 || w == nil || w.Reason != reasonErrImageNeverPull {
		t.Errorf("pod without the secret under Never: %d pulls, waiting %+v, want ErrImageNeverPull:\n%s", n, w, ev)
	}

	// With the secret: no pull.
	n, ev = run(podOf("same-secret", v1.PullIfNotPresent, true))
	if n != 0 || !strings.Contains(ev, `Container image "registry.example/private:1" already present on machine and can be accessed by the pod`) {
		t.Errorf("the pod with the secret pulled %d times, want none:\n%s", n, ev)
	}
}
