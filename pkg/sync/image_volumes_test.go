package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
	"k8s.io/utils/ptr"
)

// withImageVolume adds an image volume mounted at /vol (subPath sub) by
// the first container.
func withImageVolume(ref string, policy v1.PullPolicy, sub string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "img",
			VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}})
		c := &p.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: "img", MountPath: "/vol", SubPath: sub})
	}
}

// newImageHarness is a harness whose containers' image is present, so
// that the only pulls are the volumes'.
func newImageHarness(t *testing.T, pod *v1.Pod) *harness {
	h := newHarness(t, pod)
	h.img.SetFakeImages([]string{"busybox:latest"})
	return h
}

// pullCalls counts the fake runtime's image pulls.
func (h *harness) pullCalls() int {
	h.img.Lock()
	defer h.img.Unlock()
	n := 0
	for _, c := range h.img.Called {
		if c == "PullImage" {
			n++
		}
	}
	return n
}

func TestImageVolumeMountedReadOnlyThroughCRI(t *testing.T) {
	pod := basePod(withImageVolume("registry.example/data:1", v1.PullAlways, "etc"))
	h := newImageHarness(t, pod)
	rec, _ := withInputs(h)

	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 2 {
		t.Fatalf("running = %v, want both containers", got)
	}
	if n := h.pullCalls(); n != 1 {
		t.Errorf("pulls = %d, want the volume's image pulled once (policy Always)", n)
	}
	var img *runtimeapi.Mount
	for _, m := range rec.configs["a"].Mounts {
		if m.ContainerPath == "/vol" {
			img = m
		}
	}
	if img == nil {
		t.Fatalf("no mount at /vol: %v", rec.configs["a"].Mounts)
	}
	if img.Image.GetImage() != "registry.example/data:1" || img.Image.GetUserSpecifiedImage() != "registry.example/data:1" ||
		img.ImageSubPath != "etc" || !img.Readonly || img.HostPath != "" {
		t.Errorf("image mount = %+v", img)
	}
	for _, m := range rec.configs["b"].Mounts {
		if m.Image != nil {
			t.Errorf("container b, which does not mount the volume, got %+v", m)
		}
	}
	ev := h.events()
	if !strings.Contains(ev, `Normal Pulling Pulling image "registry.example/data:1"`) || !strings.Contains(ev, `Normal Pulled Successfully pulled image "registry.example/data:1"`) {
		t.Errorf("no Pulling/Pulled events of the volume:\n%s", ev)
	}

	// Once the containers run nothing is pulled again, even with Always.
	h.sync(pod, false)
	if n := h.pullCalls(); n != 1 {
		t.Errorf("pulls = %d after a pass that started nothing, want 1", n)
	}
}

func TestImageVolumePullFailureHoldsBackOnlyItsContainers(t *testing.T) {
	pod := basePod(withImageVolume("registry.example/missing:1", v1.PullIfNotPresent, ""))
	h := newImageHarness(t, pod)
	h.img.InjectError("PullImage", errors.New("not found"))

	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 1 || got[0] != "b" {
		t.Fatalf("running = %v, want only b (a mounts the failing volume)", got)
	}
	w := waitingOf(h, "a")
	if w == nil || w.Reason != reasonErrImagePull || !strings.Contains(w.Message, "not found") {
		t.Fatalf("a waiting = %+v, want ErrImagePull naming the cause", w)
	}
	ev := h.events()
	for _, want := range []string{
		`Warning Failed Failed to pull image "registry.example/missing:1": not found`,
		"Warning Failed Error: ErrImagePull",
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %q:\n%s", want, ev)
		}
	}

	// Inside the back-off nothing is pulled; the reason turns to ImagePullBackOff.
	h.sync(pod, false)
	if n := h.pullCalls(); n != 1 {
		t.Errorf("pulls = %d, want none inside the back-off", n)
	}
	w = waitingOf(h, "a")
	if w == nil || w.Reason != reasonImagePullBackOff || !strings.Contains(w.Message, `Back-off pulling image "registry.example/missing:1": ErrImagePull: not found`) {
		t.Errorf("a waiting = %+v, want ImagePullBackOff", w)
	}
	if ev := h.events(); !strings.Contains(ev, "Warning Failed Error: ImagePullBackOff") {
		t.Errorf("no Error: ImagePullBackOff event:\n%s", ev)
	}
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 1 || got[0] != "b" {
		t.Errorf("running = %v, want b still alone", got)
	}
}

func TestImageVolumeNeverPolicyAbsent(t *testing.T) {
	pod := basePod(withImageVolume("registry.example/absent:1", v1.PullNever, ""))
	h := newImageHarness(t, pod)
	h.sync(pod, false)
	if w := waitingOf(h, "a"); w == nil || w.Reason != reasonErrImageNeverPull {
		t.Errorf("a waiting = %+v, want ErrImageNeverPull", w)
	}
	if n := h.pullCalls(); n != 0 {
		t.Errorf("pulls = %d with policy Never", n)
	}
}

func TestImageVolumePulledWithPodSecrets(t *testing.T) {
	pod := basePod(withImageVolume("registry.example/private:1", "", ""), func(p *v1.Pod) {
		p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
	})
	h := newImageHarness(t, pod)
	h.w.deps.secrets = secretOf{&v1.Secret{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{
		v1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example":{"username":"u","password":"p"}}}`)}}}
	h.sync(pod, false)
	h.img.AssertImagePulledWithAuth(t, &runtimeapi.ImageSpec{Image: "registry.example/private:1", UserSpecifiedImage: "registry.example/private:1"},
		&runtimeapi.AuthConfig{Username: "u", Password: "p"}, "the volume's image was not pulled with the pod's secret")
}

type secretOf struct{ s *v1.Secret }

func (f secretOf) GetSecret(context.Context, string, string) (*v1.Secret, error) { return f.s, nil }

func waitingOf(h *harness, name string) *v1.ContainerStateWaiting {
	for _, cs := range h.status.last.ContainerStatuses {
		if cs.Name == name {
			return cs.State.Waiting
		}
	}
	return nil
}

// imageVolumeCounter counts what the worker reports of image volumes.
type imageVolumeCounter struct {
	noMetrics
	requested, mounted, failed int
}

func (c *imageVolumeCounter) ObserveImageVolumes(requested, mounted, failed int) {
	c.requested += requested
	c.mounted += mounted
	c.failed += failed
}

func TestImageVolumeMetrics(t *testing.T) {
	pod := basePod(withImageVolume("registry.example/data:1", v1.PullIfNotPresent, "etc"), func(p *v1.Pod) {
		// The same volume twice in a: one volume requested, two mounts.
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "img", MountPath: "/whole"})
	})
	h := newImageHarness(t, pod)
	m := &imageVolumeCounter{}
	h.w.deps.metrics = m
	h.rt.InjectError("CreateContainer", fmt.Errorf("failed to create containerd container: %w: no space", crierrors.ErrImageVolumeMountFailed))
	h.sync(pod, false)
	if m.requested != 1 || m.mounted != 0 || m.failed != 2 {
		t.Errorf("after a failed mount: requested %d, mounted %d, failed %d; want 1, 0, 2", m.requested, m.mounted, m.failed)
	}
	if w := waitingOf(h, "a"); w == nil || w.Reason != reasonCreateError {
		t.Errorf("a waiting = %+v, want CreateContainerError", w)
	}
	h.sync(pod, false)
	if m.requested != 2 || m.mounted != 2 || m.failed != 2 {
		t.Errorf("after the retry: requested %d, mounted %d, failed %d; want 2, 2, 2", m.requested, m.mounted, m.failed)
	}
}

func TestImageMount(t *testing.T) {
	spec := &runtimeapi.ImageSpec{Image: "sha256:abc", UserSpecifiedImage: "data:1"}
	for _, tc := range []struct {
		name    string
		vm      v1.VolumeMount
		sub     string
		want    *runtimeapi.Mount
		wantErr string
	}{
		{name: "read-only whatever the volumeMount says", vm: v1.VolumeMount{MountPath: "/data"},
			want: &runtimeapi.Mount{ContainerPath: "/data", Image: spec, Readonly: true}},
		{name: "subPath inside the image", vm: v1.VolumeMount{MountPath: "/data"}, sub: "etc/conf",
			want: &runtimeapi.Mount{ContainerPath: "/data", Image: spec, ImageSubPath: "etc/conf", Readonly: true}},
		{name: "recursive read-only", vm: v1.VolumeMount{MountPath: "/data", ReadOnly: true, RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyIfPossible)},
			want: &runtimeapi.Mount{ContainerPath: "/data", Image: spec, Readonly: true, RecursiveReadOnly: true}},
		{name: "absolute subPath", vm: v1.VolumeMount{MountPath: "/data"}, sub: "/etc", wantErr: "must not be an absolute path"},
		{name: "subPath climbing out", vm: v1.VolumeMount{MountPath: "/data"}, sub: "a/../../etc", wantErr: "must not contain '..'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := imageMount(&tc.vm, spec, tc.sub, runtimeapi.MountPropagation_PROPAGATION_PRIVATE)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want.String() {
				t.Errorf("mount = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]v1.PullPolicy{
		"busybox":                      v1.PullAlways,
		"busybox:latest":               v1.PullAlways,
		"127.0.0.1:5000/busybox":       v1.PullAlways,
		"127.0.0.1:5000/busybox:1.37":  v1.PullIfNotPresent,
		"busybox@sha256:" + sha256zero: v1.PullIfNotPresent,
	} {
		if got := defaultPullPolicy(image); got != want {
			t.Errorf("defaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

const sha256zero = "0000000000000000000000000000000000000000000000000000000000000000"
