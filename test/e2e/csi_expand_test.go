//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	spec := claimPod(ns, claim.Name, "grows", "trap 'exit 0' TERM; echo before > /data/file; sleep 3600 & wait")
	pod := waitPod(t, createPod(t, spec), 3*time.Minute, runningAndReady)

	pv, newSize := resizeAsController(t, ctx, ns, claim.Name)

	// The agent reads the claims of published volumes once a minute.
	waitClaimGrown(t, ns, claim.Name, newSize, 3*time.Minute)

	// The driver saw NodeExpandVolume with the new size: no ControllerExpandVolume ran, so
	// the size in its record can only come from the node's call.
	if got := hostpathVolumeSize(t, cfg.CSIHostpathDataDir(), pv.Spec.CSI.VolumeHandle); got != newSize.Value() {
		t.Errorf("the driver records %d bytes for volume %s, want %d", got, pv.Spec.CSI.VolumeHandle, newSize.Value())
	}
	waitResizeEvents(t, pod, claim, pv.Name)

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

// TestCSIOfflineExpansion grows a claim while no pod uses it: a first pod has the claim
// provisioned and writes to it, and is deleted (the volume unpublished and unstaged); the
// resizer's part is played through the API as in TestCSIOnlineExpansion; then a second pod
// of the claim starts, and the agent grows the volume as it mounts it (after
// NodePublishVolume, as the kubelet does), before the pod's containers start: the driver is
// asked for the new size, the claim's capacity is written and its resize status cleared,
// the kubelet's FileSystemResizeSuccessful events are recorded, and the pod reads the
// first pod's data.
func TestCSIOfflineExpansion(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cfg := framework.Cluster(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 10*time.Minute)
	ns, claim := hostpathClaim(t, ctx, "csi-offline-expand")
	first := waitPod(t, createPod(t, claimPod(ns, claim.Name, "writes", "trap 'exit 0' TERM; echo kept > /data/file; sleep 3600 & wait")), 3*time.Minute, runningAndReady)
	deletePodAndWait(t, first)
	claimNow, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	boundPV, err := cs.CoreV1().PersistentVolumes().Get(ctx, claimNow.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No pod of the claim is left on the node: its staging directory is gone (NodeUnstage).
	staging := filepath.Join(cfg.AgentRootDir(), "plugins", "kubernetes.io", "csi", harness.CSIHostpathDriver,
		fmt.Sprintf("%x", sha256.Sum256([]byte(boundPV.Spec.CSI.VolumeHandle))))
	framework.Eventually(t, 2*time.Minute, func() error {
		if _, err := os.Lstat(staging); !os.IsNotExist(err) {
			return fmt.Errorf("staging directory %s still there (%v)", staging, err)
		}
		return nil
	})

	pv, newSize := resizeAsController(t, ctx, ns, claim.Name)
	second := waitPod(t, createPod(t, claimPod(ns, claim.Name, "reads", "trap 'exit 0' TERM; cat /data/file; sleep 3600 & wait")), 3*time.Minute, runningAndReady)
	// The expansion is part of the mount, which ends before the containers start: the claim
	// has grown by the time the pod runs.
	c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Status.Capacity[corev1.ResourceStorage]; got.Cmp(newSize) != 0 {
		t.Errorf("claim capacity %s once the pod runs, want %s (resize status %v)", got.String(), newSize.String(), c.Status.AllocatedResourceStatuses)
	}
	waitClaimGrown(t, ns, claim.Name, newSize, time.Minute)
	if got := hostpathVolumeSize(t, cfg.CSIHostpathDataDir(), pv.Spec.CSI.VolumeHandle); got != newSize.Value() {
		t.Errorf("the driver records %d bytes for volume %s, want %d", got, pv.Spec.CSI.VolumeHandle, newSize.Value())
	}
	waitResizeEvents(t, second, claim, pv.Name)
	out, err := cs.CoreV1().Pods(ns).GetLogs(second.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", second.Name, err)
	}
	if !strings.Contains(string(out), "kept") {
		t.Errorf("the second pod read %q from the claim, want the first pod's %q", out, "kept")
	}
	deletePodAndWait(t, second)
}

// claimPod is a busybox pod of ns running script, with the claim mounted at /data.
func claimPod(ns, claim, name, script string) *corev1.Pod {
	spec := busyboxPod(name, corev1.RestartPolicyAlways, script)
	spec.Namespace = ns
	spec.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	spec.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return spec
}

// resizeAsController plays external-resizer's part after ControllerExpandVolume for the
// bound claim name of ns: the PV's capacity raised by 1Mi first, then the claim's
// allocatedResources set and its resize status NodeResizePending. It returns the PV as
// updated and the new size.
func resizeAsController(t *testing.T, ctx context.Context, ns, name string) (*corev1.PersistentVolume, resource.Quantity) {
	t.Helper()
	cs := framework.Client(t)
	claim, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
		t.Fatalf("claim %s: phase %s, volume %q; want Bound", claim.Name, claim.Status.Phase, claim.Spec.VolumeName)
	}
	oldSize := claim.Status.Capacity[corev1.ResourceStorage]
	newSize := oldSize.DeepCopy()
	newSize.Add(resource.MustParse("1Mi"))
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity[corev1.ResourceStorage] = newSize
	if pv, err = cs.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("raise the PV's capacity: %v", err)
	}
	claim.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: newSize}
	claim.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
		corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizePending}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("mark the claim NodeResizePending: %v", err)
	}
	return pv, newSize
}

// waitClaimGrown waits until the claim's capacity is size and its resize status is cleared.
func waitClaimGrown(t *testing.T, ns, name string, size resource.Quantity, within time.Duration) {
	t.Helper()
	cs := framework.Client(t)
	framework.Eventually(t, within, func() error {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := c.Status.Capacity[corev1.ResourceStorage]; got.Cmp(size) != 0 {
			return fmt.Errorf("claim capacity %s, want %s (resize status %v, conditions %+v)",
				got.String(), size.String(), c.Status.AllocatedResourceStatuses, c.Status.Conditions)
		}
		if s, ok := c.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; ok {
			return fmt.Errorf("claim resize status still %s", s)
		}
		return nil
	})
}

// waitResizeEvents waits for the kubelet's FileSystemResizeSuccessful event on the pod and
// on the claim, and checks that the pod has no VolumeResizeFailed event.
func waitResizeEvents(t *testing.T, pod *corev1.Pod, claim *corev1.PersistentVolumeClaim, pvName string) {
	t.Helper()
	want := fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", pvName, harness.NodeName)
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
