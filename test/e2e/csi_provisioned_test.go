//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestCSIProvisionedVolume uses the hostpath CSI driver that make up deploys, as a user
// would: a claim of the default StorageClass is provisioned by external-provisioner once a
// pod needs it (WaitForFirstConsumer), the attach/detach controller and external-attacher
// attach it, the agent waits for that, stages and publishes it; what one pod writes the
// next pod of the claim reads; once no pod uses it the node stops reporting it in use and
// it is detached; deleting the claim deletes the volume.
func TestCSIProvisionedVolume(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cfg := framework.Cluster(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 10*time.Minute)
	ns, claim := hostpathClaim(t, ctx, "csi-prov")
	// Late binding: nothing is provisioned until a pod is scheduled with the claim.
	framework.Eventually(t, time.Minute, func() error {
		if !hasEvent(claimEvents(t, claim), "WaitForFirstConsumer", "") {
			return fmt.Errorf("no WaitForFirstConsumer event on the claim")
		}
		return nil
	})

	withClaim := func(p *corev1.Pod) *corev1.Pod {
		p.Namespace = ns
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return p
	}
	writerSpec := withClaim(busyboxPod("writer", corev1.RestartPolicyAlways,
		"trap 'exit 0' TERM; echo written-by-$HOSTNAME > /data/file && touch /data/done; sleep 3600 & wait"))
	writerSpec.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/data/done"}}}}
	writer := waitPod(t, createPod(t, writerSpec), 3*time.Minute, runningAndReady)

	// The provisioner made the PV for the claim, on this node.
	claim, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
		t.Fatalf("claim %s: phase %s, volume %q; want Bound", claim.Name, claim.Status.Phase, claim.Spec.VolumeName)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != harness.CSIHostpathDriver || pv.Spec.CSI.VolumeHandle == "" {
		t.Fatalf("PV %s: source %+v, want a CSI volume of %s", pv.Name, pv.Spec.CSI, harness.CSIHostpathDriver)
	}
	if by := pv.Annotations["pv.kubernetes.io/provisioned-by"]; by != harness.CSIHostpathDriver {
		t.Errorf("PV %s provisioned by %q, want %s", pv.Name, by, harness.CSIHostpathDriver)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Spec.StorageClassName != harness.CSIHostpathStorageClass {
		t.Errorf("PV %s: reclaim %s, class %q; want Delete of %s", pv.Name, pv.Spec.PersistentVolumeReclaimPolicy, pv.Spec.StorageClassName, harness.CSIHostpathStorageClass)
	}
	if !nodeAffinityNames(pv, "topology.hostpath.csi/node", harness.NodeName) {
		t.Errorf("PV %s: node affinity %+v, want topology.hostpath.csi/node=%s", pv.Name, pv.Spec.NodeAffinity, harness.NodeName)
	}
	handle := pv.Spec.CSI.VolumeHandle
	if _, err := os.Stat(filepath.Join(cfg.CSIHostpathDataDir(), handle)); err != nil {
		t.Errorf("the driver's data of volume %s: %v", handle, err)
	}

	// The attach/detach controller named the attachment as the kubelet expects it, and
	// external-attacher attached it.
	vaName := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+harness.CSIHostpathDriver+harness.NodeName)))
	va, err := cs.StorageV1().VolumeAttachments().Get(ctx, vaName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("VolumeAttachment %s: %v", vaName, err)
	}
	if !va.Status.Attached || va.Spec.Attacher != harness.CSIHostpathDriver || va.Spec.NodeName != harness.NodeName ||
		va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != pv.Name {
		t.Errorf("VolumeAttachment %s: attacher %s, node %s, source %v, attached %v; want %s attached to %s for PV %s",
			va.Name, va.Spec.Attacher, va.Spec.NodeName, va.Spec.Source.PersistentVolumeName, va.Status.Attached,
			harness.CSIHostpathDriver, harness.NodeName, pv.Name)
	}
	unique := corev1.UniqueVolumeName("kubernetes.io/csi/" + harness.CSIHostpathDriver + "^" + handle)
	framework.Eventually(t, time.Minute, func() error {
		node, err := cs.CoreV1().Nodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !slices.Contains(node.Status.VolumesInUse, unique) {
			return fmt.Errorf("volumesInUse %v, want %s", node.Status.VolumesInUse, unique)
		}
		if !slices.ContainsFunc(node.Status.VolumesAttached, func(a corev1.AttachedVolume) bool { return a.Name == unique }) {
			return fmt.Errorf("volumesAttached %v, want %s", node.Status.VolumesAttached, unique)
		}
		return nil
	})
	root := cfg.AgentRootDir()
	target := filepath.Join(root, "pods", string(writer.UID), "volumes", "kubernetes.io~csi", pv.Name, "mount")
	if m := mountInfo(t, target); m == "" {
		t.Errorf("the writer's volume is not mounted at %s", target)
	}
	// The claim's usage, as the driver measures it, is on the agent's /metrics under the
	// kubelet's name and labels, once the stats loop has measured the writer's volumes
	// (every housekeeping round until they are all set up, then every
	// volumeStatsAggPeriod: the default minute in the harness).
	claimLabels := map[string]string{"namespace": ns, "persistentvolumeclaim": claim.Name}
	framework.Eventually(t, 2*time.Minute, func() error {
		out, err := framework.KubectlErr(t, nodeProxy("/metrics")...)
		if err != nil {
			return err
		}
		m, err := samples(out)
		if err != nil {
			return fmt.Errorf("parse /metrics: %w", err)
		}
		s, err := sampleOf(m, "kubelet_volume_stats_capacity_bytes", claimLabels)
		if err != nil {
			return err
		}
		if s.Value <= 0 {
			return fmt.Errorf("kubelet_volume_stats_capacity_bytes%v = %v, want the volume's size", claimLabels, s.Value)
		}
		return nil
	})
	// What the pod went through, for the log: the agent's FailedMount while the volume
	// was not attached yet, if it got there first. That one says so, not that the Node
	// authorizer refused to show an attachment not made yet.
	ev := podEvents(t, writer)
	t.Logf("the writer's events:\n%s", eventSummary(ev))
	if hasEvent(ev, "FailedMount", "forbidden") {
		t.Errorf("a FailedMount event tells of a forbidden request")
	}
	deletePodAndWait(t, writer)

	reader := createPod(t, withClaim(reportPod(ns, "reader", "cat /data/file > /dev/termination-log")))
	if term := terminated(t, reader); term.ExitCode != 0 || term.Message != "written-by-"+writer.Name+"\n" {
		t.Fatalf("reader: exit %d, read %q; want what the writer wrote", term.ExitCode, term.Message)
	}
	deletePodAndWait(t, reader)
	// No pod of the claim is left: its series goes at the stats loop's next round.
	framework.Eventually(t, time.Minute, func() error {
		out, err := framework.KubectlErr(t, nodeProxy("/metrics")...)
		if err != nil {
			return err
		}
		m, err := samples(out)
		if err != nil {
			return fmt.Errorf("parse /metrics: %w", err)
		}
		if s, err := sampleOf(m, "kubelet_volume_stats_capacity_bytes", claimLabels); err == nil {
			return fmt.Errorf("%s is still shown", s)
		}
		return nil
	})

	// No pod uses the volume: the node stops reporting it, the attach/detach controller
	// detaches it and external-attacher lets the attachment go.
	framework.Eventually(t, 3*time.Minute, func() error {
		node, err := cs.CoreV1().Nodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if slices.Contains(node.Status.VolumesInUse, unique) {
			return fmt.Errorf("volumesInUse still lists %s", unique)
		}
		if _, err := cs.StorageV1().VolumeAttachments().Get(context.Background(), vaName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("VolumeAttachment %s still there (%v)", vaName, err)
		}
		return nil
	})
	// This volume's staging directory only: other tests stage volumes of the same driver
	// in parallel.
	staging := filepath.Join(root, "plugins", "kubernetes.io", "csi", harness.CSIHostpathDriver,
		fmt.Sprintf("%x", sha256.Sum256([]byte(handle))))
	if m := mountsUnder(t, staging); len(m) > 0 {
		t.Errorf("staging mounts left: %v", m)
	}
	if _, err := os.Lstat(staging); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("staging directory %s left (%v)", staging, err)
	}

	// Reclaim policy Delete: the provisioner deletes the volume, then the PV.
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete PVC: %v", err)
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		if _, err := cs.CoreV1().PersistentVolumes().Get(context.Background(), pv.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("PV %s still there (%v)", pv.Name, err)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(cfg.CSIHostpathDataDir(), handle)); !os.IsNotExist(err) {
		t.Errorf("the driver's data of volume %s is still there (%v)", handle, err)
	}
}

// claimEvents lists the events of a claim.
func claimEvents(t *testing.T, claim *corev1.PersistentVolumeClaim) []corev1.Event {
	t.Helper()
	list, err := framework.Client(t).CoreV1().Events(claim.Namespace).List(framework.Context(t, 30*time.Second), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(claim.UID),
	})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	return list.Items
}

// nodeAffinityNames says whether the PV's required node affinity selects key=value.
func nodeAffinityNames(pv *corev1.PersistentVolume, key, value string) bool {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return false
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == key && e.Operator == corev1.NodeSelectorOpIn && slices.Contains(e.Values, value) {
				return true
			}
		}
	}
	return false
}

// hostpathClaim makes a namespace and a claim of 1Mi of the hostpath CSI driver's
// StorageClass in it, deleted when the test ends.
func hostpathClaim(t *testing.T, ctx context.Context, prefix string) (string, *corev1.PersistentVolumeClaim) {
	t.Helper()
	if !framework.Cluster(t).CSIHostpath {
		t.Fatal("the cluster has no hostpath CSI driver (harness.Config.CSIHostpath)")
	}
	ns := newNamespace(t, prefix)
	cs := framework.Client(t)
	claim, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(harness.CSIHostpathStorageClass),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create PVC: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
	})
	return ns, claim
}
