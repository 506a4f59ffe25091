//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestImageGCRemovesImagesUnusedForTheMaximumAge: with imageMaximumGCAge set, an image
// whose last container is gone is removed from the runtime once unused for that long,
// while the image of a running pod stays. The disk cannot be filled for the usage-based
// collection; the maximum age shows the same collector on the real runtime. The agent is
// restarted with imageMaximumGCAge 30s and image GC every 5 s (the hidden
// --image-gc-period; the kubelet's period is a fixed 5 minutes), so the test is not
// parallel and is nodeagent's only. Meanwhile every image no container uses goes, the
// harness's among them: the test pulls those again before it ends.
func TestImageGCRemovesImagesUnusedForTheMaximumAge(t *testing.T) {
	requireNodeagent(t)
	ctx := framework.Context(t, 10*time.Minute)
	_, img := framework.CRI(t)
	ref := pushImageOfItsOwn(t, ctx)
	tags := imageTags(t, ctx, img)

	// Registered first, so it runs after the agent is back with the harness's configuration.
	t.Cleanup(func() { restoreImages(t, context.Background(), img, tags) })
	framework.RestartAgentWith(t, ctx, "imageMinimumGCAge: 10s\nimageMaximumGCAge: 30s\n", "--image-gc-period=5s")

	keep := waitPod(t, createPod(t, busyboxPod("imagegc-keep", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 3600 & wait")),
		3*time.Minute, runningAndReady)
	gone := busyboxPod("imagegc-gone", corev1.RestartPolicyNever, "true")
	gone.Spec.Containers[0].Image = ref
	gone = waitPod(t, createPod(t, gone), 3*time.Minute, phaseIs(corev1.PodSucceeded))
	goneID, keepID := imageID(t, ctx, img, ref), imageID(t, ctx, img, harness.BusyboxImage)
	if goneID == "" || keepID == "" || goneID == keepID {
		t.Fatalf("image IDs: %q of %s, %q of %s; want two images", goneID, ref, keepID, harness.BusyboxImage)
	}

	// The pod's exited container keeps the image in use; once the pod is deleted and its
	// container gone, the image is unused, and removed 30 s later (plus a GC period).
	deletePodAndWait(t, gone)
	framework.Eventually(t, 3*time.Minute, func() error {
		if cs := containersOfPod(t, string(gone.UID)); len(cs) > 0 {
			return fmt.Errorf("containers of the deleted pod left: %s", describeContainers(cs))
		}
		if imageID(t, ctx, img, goneID) != "" {
			return fmt.Errorf("image %s (%s) is still in the runtime", goneID, ref)
		}
		return nil
	})
	if imageID(t, ctx, img, keepID) == "" {
		t.Errorf("the image %s of the running pod was removed", harness.BusyboxImage)
	}
	if p := waitPod(t, keep, time.Minute, runningAndReady); p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the running pod was disturbed: %s", describeStatuses(p.Status.ContainerStatuses))
	}
	framework.Eventually(t, time.Minute, func() error {
		out, err := framework.KubectlErr(t, nodeProxy("/metrics")...)
		if err != nil {
			return err
		}
		m, err := samples(out)
		if err != nil {
			return fmt.Errorf("parse /metrics: %w", err)
		}
		if s, err := sampleOf(m, "kubelet_image_garbage_collected_total", map[string]string{"reason": "age"}); err != nil || s.Value < 1 {
			return fmt.Errorf("kubelet_image_garbage_collected_total{reason=\"age\"} = %v, %v", s, err)
		}
		return nil
	})
}

// pushImageOfItsOwn pushes the e2e busybox image with a label of this run to the local
// registry: a new image (its config differs) sharing busybox's layers, which no other
// test uses, and returns its reference.
func pushImageOfItsOwn(t *testing.T, ctx context.Context) string {
	t.Helper()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	return framework.PushBusyboxVariant(t, ctx, "image-gc:"+run, map[string]string{"nodeagent.test/image-gc": run})
}

// imageID is the ID of the runtime's image named ref (a reference or an ID), empty when
// the runtime has none.
func imageID(t *testing.T, ctx context.Context, img runtimeapi.ImageServiceClient, ref string) string {
	t.Helper()
	resp, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("CRI ImageStatus %s: %v", ref, err)
	}
	return resp.GetImage().GetId()
}

// imageTags lists the tags of the runtime's images, sorted.
func imageTags(t *testing.T, ctx context.Context, img runtimeapi.ImageServiceClient) []string {
	t.Helper()
	resp, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatalf("CRI ListImages: %v", err)
	}
	var out []string
	for _, i := range resp.GetImages() {
		out = append(out, i.GetRepoTags()...)
	}
	slices.Sort(out)
	return out
}

// restoreImages pulls again, through CRI as a node would, each of tags the runtime no
// longer has: every image the harness and the tests before this one put there comes from
// the local registry.
func restoreImages(t *testing.T, ctx context.Context, img runtimeapi.ImageServiceClient, tags []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	have := imageTags(t, ctx, img)
	for _, tag := range tags {
		if _, found := slices.BinarySearch(have, tag); found {
			continue
		}
		if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: tag}}); err != nil {
			t.Errorf("pull %s again after image GC: %v", tag, err)
		}
	}
}
