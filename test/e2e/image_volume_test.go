//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// imageVolumePod is a pod of one sleeping busybox container "main" that mounts an image
// volume "img" of reference at /vol, and its bin directory alone (subPath) at /sub.
func imageVolumePod(prefix, reference string, policy corev1.PullPolicy) *corev1.Pod {
	pod := busyboxPod(prefix, corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 3600 & wait")
	pod.Spec.Volumes = []corev1.Volume{{Name: "img", VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: reference, PullPolicy: policy}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "img", MountPath: "/vol"},
		{Name: "img", MountPath: "/sub", SubPath: "bin"},
	}
	return pod
}

// imageVolumeMounts are the runtime's mounts of a sandbox's image volumes on the host:
// containerd mounts each image once per sandbox under <cri state>/image-volumes/<sandbox>.
func imageVolumeMounts(t *testing.T, sandboxID string) []string {
	var out []string
	for _, m := range harness.MountsUnder(framework.Cluster(t).RunDir) {
		if strings.Contains(m, "/image-volumes/"+sandboxID) {
			out = append(out, m)
		}
	}
	return out
}

// TestImageVolume: spec.volumes[].image, GA since 1.36: the image is pulled with the
// volume's pull policy, mounted read-only (whole or a subPath) through CRI, released with
// the pod; an image that cannot be pulled holds back only the container that mounts it.
func TestImageVolume(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	// The e2e busybox image, pulled straight from the local registry: its /bin/busybox
	// runs everywhere, so the container can execute what it finds in the volume.
	volumeImage := harness.RegistryAddr + "/e2e-test-images/busybox:" + harness.BusyboxE2ETag

	t.Run("mounted read-only with subPath, released with the pod", func(t *testing.T) {
		t.Parallel()
		pod := waitPod(t, createPod(t, imageVolumePod("imgvol-", volumeImage, corev1.PullAlways)), 3*time.Minute, runningAndReady)

		if out := mustExec(t, pod, "main", "/vol/bin/busybox", "echo", "from the image"); strings.TrimSpace(out) != "from the image" {
			t.Errorf("/vol/bin/busybox echo printed %q", out)
		}
		if out := mustExec(t, pod, "main", "sh", "-c", "test -x /sub/busybox && test ! -e /sub/bin && echo subpath"); strings.TrimSpace(out) != "subpath" {
			t.Errorf("the subPath mount is not the image's bin directory: %q", out)
		}
		if out, err := podExec(t, pod, "main", "touch", "/vol/written"); err == nil || !strings.Contains(err.Error(), "Read-only file system") {
			t.Errorf("writing into the image volume: err %v, output %q; want a read-only file system", err, out)
		}
		if out, err := podExec(t, pod, "main", "touch", "/sub/written"); err == nil || !strings.Contains(err.Error(), "Read-only file system") {
			t.Errorf("writing into the subPath of the image volume: err %v, output %q; want a read-only file system", err, out)
		}
		framework.Eventually(t, 30*time.Second, func() error {
			ev := podEvents(t, pod)
			if !hasEvent(ev, "Pulling", fmt.Sprintf("Pulling image %q", volumeImage)) || !hasEvent(ev, "Pulled", fmt.Sprintf("Successfully pulled image %q", volumeImage)) {
				return fmt.Errorf("no Pulling/Pulled events of the volume's image:\n%s", eventSummary(ev))
			}
			return nil
		})

		sandboxes := sandboxesOf(t, string(pod.UID))
		if len(sandboxes) != 1 {
			t.Fatalf("sandboxes of the pod: %d, want 1", len(sandboxes))
		}
		if got := imageVolumeMounts(t, sandboxes[0].Id); len(got) == 0 {
			t.Fatalf("no image volume mount of sandbox %s on the host while the pod runs", sandboxes[0].Id)
		}
		zero := int64(0)
		if err := framework.Client(t).CoreV1().Pods(pod.Namespace).Delete(framework.Context(t, 30*time.Second), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, time.Minute, func() error {
			if got := imageVolumeMounts(t, sandboxes[0].Id); len(got) != 0 {
				return fmt.Errorf("image volume mounts left after the pod was deleted: %v", got)
			}
			if n := len(sandboxesOf(t, string(pod.UID))); n != 0 {
				return fmt.Errorf("%d sandboxes left after the pod was deleted", n)
			}
			return nil
		})
	})

	t.Run("never-existing image holds back only its container", func(t *testing.T) {
		t.Parallel()
		neighbour := waitPod(t, createPod(t, busyboxPod("imgvol-neighbour", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 3600 & wait")), 3*time.Minute, runningAndReady)

		missing := harness.RegistryAddr + "/nodeagent/never-existed-volume:1"
		bad := imageVolumePod("imgvol-missing-", missing, corev1.PullIfNotPresent)
		bad.Spec.Containers = append(bad.Spec.Containers, corev1.Container{
			Name: "free", Image: harness.BusyboxImage, Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
		})
		bad = createPod(t, bad)
		seen := map[string]bool{}
		got := waitPod(t, bad, 3*time.Minute, func(p *corev1.Pod) error {
			var free bool
			for _, cs := range p.Status.ContainerStatuses {
				switch {
				case cs.Name == "main" && cs.State.Waiting != nil:
					seen[cs.State.Waiting.Reason] = true
				case cs.Name == "main" && cs.State.Running != nil:
					return fmt.Errorf("the container mounting a missing image runs")
				case cs.Name == "free":
					free = cs.State.Running != nil
				}
			}
			if !seen["ErrImagePull"] || !seen["ImagePullBackOff"] || !free {
				return fmt.Errorf("want main waiting ErrImagePull then ImagePullBackOff and free running; seen %v, containers %s",
					seen, describeStatuses(p.Status.ContainerStatuses))
			}
			return nil
		})
		if got.Status.Phase != corev1.PodPending {
			t.Errorf("phase %s, want Pending", got.Status.Phase)
		}
		if c := podCondition(got, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" {
			t.Errorf("Ready = %+v, want False ContainersNotReady", c)
		}
		framework.Eventually(t, 30*time.Second, func() error {
			ev := podEvents(t, bad)
			if !hasEvent(ev, "Failed", fmt.Sprintf("Failed to pull image %q", missing)) || !hasEvent(ev, "Failed", "Error: ErrImagePull") ||
				!hasEvent(ev, "BackOff", fmt.Sprintf("Back-off pulling image %q", missing)) {
				return fmt.Errorf("missing the pull failure's events:\n%s", eventSummary(ev))
			}
			return nil
		})

		n := waitPod(t, neighbour, 10*time.Second, runningAndReady)
		if cs := n.Status.ContainerStatuses; len(cs) != 1 || cs[0].RestartCount != 0 {
			t.Errorf("the neighbour pod was disturbed: %s", describeStatuses(cs))
		}
	})
}
