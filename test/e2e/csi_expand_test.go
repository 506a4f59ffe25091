//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestCSIOnlineExpansion grows a claim under a running pod. There is no external-resizer
// on this machine, so the test plays its part through the API, as it would after
// ControllerExpandVolume: the PV's capacity raised, the claim's allocatedResources set
// and its resize status NodeResizePending. The agent then calls NodeExpandVolume with
// the new size (the driver records the size it was asked for in its state), writes the
// new capacity to the claim and clears its resize status, and records the kubelet's
// FileSystemResizeSuccessful event on the pod, which keeps running untouched.
func TestCSIOnlineExpansion(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cfg := framework.Cluster(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 10*time.Minute)
	ns, claim := hostpathClaim(t, ctx, "csi-expand")
	spec := busyboxPod("grows", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; echo before > /data/file; sleep 3600 & wait")
	spec.Namespace = ns
	spec.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name}}}}
	spec.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod := waitPod(t, createPod(t, spec), 3*time.Minute, runningAndReady)

	claim, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
		t.Fatalf("claim %s: phase %s, volume %q; want Bound", claim.Name, claim.Status.Phase, claim.Spec.VolumeName)
	}
	oldSize := claim.Status.Capacity[corev1.ResourceStorage]
	newSize := oldSize.DeepCopy()
	newSize.Add(resource.MustParse("1Mi"))

	// The resizer's part: ControllerExpandVolume's answer goes to the PV first, then the
	// claim is marked for the node.
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity[corev1.ResourceStorage] = newSize
	if _, err := cs.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("raise the PV's capacity: %v", err)
	}
	claim.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: newSize}
	claim.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
		corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizePending}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("mark the claim NodeResizePending: %v", err)
	}

	// The agent reads the claims of published volumes once a minute.
	framework.Eventually(t, 3*time.Minute, func() error {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := c.Status.Capacity[corev1.ResourceStorage]; got.Cmp(newSize) != 0 {
			return fmt.Errorf("claim capacity %s, want %s (resize status %v, conditions %+v)",
				got.String(), newSize.String(), c.Status.AllocatedResourceStatuses, c.Status.Conditions)
		}
		if s, ok := c.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; ok {
			return fmt.Errorf("claim resize status still %s", s)
		}
		return nil
	})

	// The driver saw NodeExpandVolume with the new size: no ControllerExpandVolume ran, so
	// the size in its record can only come from the node's call.
	if got := hostpathVolumeSize(t, cfg.CSIHostpathDataDir(), pv.Spec.CSI.VolumeHandle); got != newSize.Value() {
		t.Errorf("the driver records %d bytes for volume %s, want %d", got, pv.Spec.CSI.VolumeHandle, newSize.Value())
	}
	want := fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", pv.Name, harness.NodeName)
	framework.Eventually(t, time.Minute, func() error {
		if !hasEvent(podEvents(t, pod), "FileSystemResizeSuccessful", want) {
			return fmt.Errorf("no FileSystemResizeSuccessful event %q on the pod", want)
		}
		if !hasEvent(claimEvents(t, claim), "FileSystemResizeSuccessful", want) {
			return fmt.Errorf("no FileSystemResizeSuccessful event %q on the claim", want)
		}
		return nil
	})
	if ev := podEvents(t, pod); hasEvent(ev, "VolumeResizeFailed", "") {
		t.Errorf("the pod has VolumeResizeFailed events:\n%s", eventSummary(ev))
	}

	// The pod went on running through it.
	now, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.Status.Phase != corev1.PodRunning || len(now.Status.ContainerStatuses) != 1 ||
		now.Status.ContainerStatuses[0].RestartCount != 0 || now.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("pod after the expansion: phase %s, statuses %+v; want running, never restarted",
			now.Status.Phase, now.Status.ContainerStatuses)
	}
	deletePodAndWait(t, pod)
}

// hostpathVolumeSize reads the size the hostpath driver records for a volume.
func hostpathVolumeSize(t *testing.T, dataDir, id string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "state.json"))
	if err != nil {
		t.Fatalf("the hostpath driver's state: %v", err)
	}
	var st struct {
		Volumes map[string]struct {
			Size int64 `json:"size"`
		} `json:"volumes"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("parse the hostpath driver's state: %v", err)
	}
	v, ok := st.Volumes[id]
	if !ok {
		t.Fatalf("the hostpath driver has no volume %s", id)
	}
	return v.Size
}
