//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

const hostpathDriver = "hostpath.csi.nodeagent.dev"

// deployHostpathDriver runs the project's hostpath-style CSI driver and its
// registrar as one privileged pod on the node, the way users deploy a
// node plugin: the driver's socket in plugins/<driver>, the registrar's in
// plugins_registry, and the pods and plugins directories shared both ways.
// failPublish makes the driver refuse that many NodePublishVolume calls
// first. It returns the driver's socket as the host sees it.
func deployHostpathDriver(t *testing.T, ns string, failPublish int) string {
	t.Helper()
	root := framework.Cluster(t).AgentRootDir()
	cs := framework.Client(t)
	ctx := framework.Context(t, time.Minute)

	attach, podInfo := false, true
	policy := storagev1.FileFSGroupPolicy
	driver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: hostpathDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: &attach, PodInfoOnMount: &podInfo, FSGroupPolicy: &policy,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}},
	}
	if _, err := cs.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CSIDriver: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.StorageV1().CSIDrivers().Delete(context.Background(), hostpathDriver, metav1.DeleteOptions{})
	})

	pluginDir := filepath.Join(root, "plugins", hostpathDriver)
	bidi, hostToContainer := corev1.MountPropagationBidirectional, corev1.MountPropagationHostToContainer
	dirOrCreate, dir := corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory
	hostPath := func(name, path string, typ *corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: typ}}}
	}
	grace := int64(5)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csi-hostpath-", Namespace: ns},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{
				{
					Name:  "hostpath",
					Image: harness.RegistryAddr + "/nodeagent/csi-hostpath:dev",
					Args: []string{"--drivername=" + hostpathDriver, "--nodeid=" + harness.NodeName,
						"--endpoint=unix:///csi/csi.sock", "--statedir=/csi-data-dir", fmt.Sprintf("--fail-node-publish=%d", failPublish)},
					SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "socket-dir", MountPath: "/csi"},
						{Name: "pods", MountPath: filepath.Join(root, "pods"), MountPropagation: &bidi},
						{Name: "plugins", MountPath: filepath.Join(root, "plugins"), MountPropagation: &bidi},
						{Name: "data", MountPath: "/csi-data-dir"},
						{Name: "dev", MountPath: "/dev"},
					},
				},
				{
					Name:  "registrar",
					Image: harness.RegistryAddr + "/nodeagent/csi-registrar:dev",
					Args: []string{"--csi-address=/csi/csi.sock", "--kubelet-registration-path=" + filepath.Join(pluginDir, "csi.sock"),
						"--plugin-registration-path=/registration"},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "socket-dir", MountPath: "/csi"},
						{Name: "registration", MountPath: "/registration", MountPropagation: &hostToContainer},
					},
				},
			},
			Volumes: []corev1.Volume{
				hostPath("socket-dir", pluginDir, &dirOrCreate),
				hostPath("pods", filepath.Join(root, "pods"), &dirOrCreate),
				hostPath("plugins", filepath.Join(root, "plugins"), &dirOrCreate),
				hostPath("registration", filepath.Join(root, "plugins_registry"), &dir),
				hostPath("data", filepath.Join(filepath.Dir(root), "csi-hostpath-data"), &dirOrCreate),
				hostPath("dev", "/dev", &dir),
			},
		},
	}
	plugin := createPod(t, pod)
	// Runs before createPod's own clean-up (clean-ups run last first):
	// the volumes of the test's pods must be gone before their driver.
	t.Cleanup(func() { waitCSIVolumesGone(t, root) })
	waitPod(t, plugin, 2*time.Minute, runningAndReady)
	return filepath.Join(pluginDir, "csi.sock")
}

// waitCSIVolumesGone waits until no pod directory holds a CSI volume and no
// global CSI directory is left: every volume unpublished and unstaged.
func waitCSIVolumesGone(t *testing.T, root string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func() error {
		left, _ := filepath.Glob(filepath.Join(root, "pods", "*", "volumes", "kubernetes.io~csi", "*"))
		staged, _ := filepath.Glob(filepath.Join(root, "plugins", "kubernetes.io", "csi", hostpathDriver, "*"))
		if len(left)+len(staged) > 0 {
			return fmt.Errorf("CSI volumes left: %v %v", left, staged)
		}
		return nil
	})
}

// mountsUnder lists the mount points at or below dir in this machine's
// mount table.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// mountInfo returns the mount options of the topmost mount at path, ""
// when nothing is mounted there.
func mountInfo(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	opts := ""
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == path {
			opts = f[5]
		}
	}
	return opts
}

// createCSIVolume provisions a volume through the driver's controller
// service, as external-provisioner would, and deletes it when the test
// ends.
func createCSIVolume(t *testing.T, socket, name string) string {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctrl := csipb.NewControllerClient(conn)
	resp, err := ctrl.CreateVolume(framework.Context(t, 30*time.Second), &csipb.CreateVolumeRequest{
		Name:          name,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	id := resp.GetVolume().GetVolumeId()
	t.Cleanup(func() {
		_, _ = ctrl.DeleteVolume(context.Background(), &csipb.DeleteVolumeRequest{VolumeId: id})
	})
	return id
}

// csiPV is a PersistentVolume of the hostpath driver for volume id; bound
// ahead to claim when claim is set, available otherwise.
func csiPV(t *testing.T, id string, claim *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csi-pv-"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: hostpathDriver, VolumeHandle: id}},
		},
	}
	if claim != nil {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: claim.Namespace, Name: claim.Name}
	}
	cs := framework.Client(t)
	created, err := cs.CoreV1().PersistentVolumes().Create(framework.Context(t, 30*time.Second), pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create PV: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	return created
}

func claimSpec() corev1.PersistentVolumeClaimSpec {
	return corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: ptr.To(""),
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
	}
}

// deletePodAndWait deletes the pod and waits until the apiserver has
// forgotten it: the agent has torn it down, volumes included.
func deletePodAndWait(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	cs := framework.Client(t)
	if err := cs.CoreV1().Pods(pod.Namespace).Delete(framework.Context(t, 30*time.Second), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", pod.Name, err)
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		_, err := cs.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("pod %s still exists", pod.Name)
		}
		return nil
	})
}

// TestCSIHostpathVolumes runs a real CSI driver as a pod on the node and
// uses its volumes: registration (the Node's annotation, the CSINode), a
// PersistentVolume whose data outlives the pod that wrote it, a driver
// that refuses the first publishes (FailedMount, then the pod starts), an
// inline ephemeral volume, a generic ephemeral volume, and teardowns that
// leave no mount behind.
func TestCSIHostpathVolumes(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	ns := newNamespace(t, "csi")
	root := framework.Cluster(t).AgentRootDir()
	cs := framework.Client(t)
	socket := deployHostpathDriver(t, ns, 2)

	framework.Eventually(t, time.Minute, func() error {
		node, err := cs.CoreV1().Nodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ids := map[string]string{}
		_ = json.Unmarshal([]byte(node.Annotations["csi.volume.kubernetes.io/nodeid"]), &ids)
		if ids[hostpathDriver] != harness.NodeName {
			return fmt.Errorf("nodeid annotation %q", node.Annotations["csi.volume.kubernetes.io/nodeid"])
		}
		csiNode, err := cs.StorageV1().CSINodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, d := range csiNode.Spec.Drivers {
			if d.Name == hostpathDriver && d.NodeID == harness.NodeName {
				if ref := csiNode.OwnerReferences; len(ref) != 1 || ref[0].Kind != "Node" || ref[0].UID != node.UID {
					return fmt.Errorf("CSINode owner %+v", ref)
				}
				return nil
			}
		}
		return fmt.Errorf("CSINode drivers %+v", csiNode.Spec.Drivers)
	})

	// A claim bound ahead to a PV of a volume made through the driver.
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns}, Spec: claimSpec()}
	pv := csiPV(t, createCSIVolume(t, socket, "e2e-data-"+ns), claim)
	claim.Spec.VolumeName = pv.Name
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(framework.Context(t, 30*time.Second), claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PVC: %v", err)
	}
	withClaim := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return p
	}

	// The writer stays running while the test looks at its volume.
	writerSpec := withClaim(busyboxPod("writer", corev1.RestartPolicyAlways,
		"trap 'exit 0' TERM; echo written-by-$HOSTNAME > /data/file && touch /data/done; sleep 3600 & wait"))
	writerSpec.Namespace = ns
	writerSpec.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/data/done"}}}}
	writer := waitPod(t, createPod(t, writerSpec), 2*time.Minute, runningAndReady)
	// The driver refused the first two publishes: the pod said so, and
	// started once the driver let it.
	if ev := podEvents(t, writer); !hasEvent(ev, "FailedMount", "injected") {
		t.Errorf("no FailedMount event with the driver's message; events: %v", eventSummary(ev))
	}
	pvDir := filepath.Join(root, "pods", string(writer.UID), "volumes", "kubernetes.io~csi", pv.Name)
	if b, err := os.ReadFile(filepath.Join(pvDir, "vol_data.json")); err != nil || !strings.Contains(string(b), `"driverName":"`+hostpathDriver+`"`) {
		t.Errorf("vol_data.json of the writer's volume: %s, %v", b, err)
	}
	if m := mountInfo(t, filepath.Join(pvDir, "mount")); m == "" || !strings.HasPrefix(m, "rw") {
		t.Errorf("the writer's volume at %s/mount: mount options %q, want mounted read-write", pvDir, m)
	}
	deletePodAndWait(t, writer)
	if m := mountsUnder(t, filepath.Join(root, "pods", string(writer.UID))); len(m) > 0 {
		t.Errorf("mounts left after the writer went: %v", m)
	}

	reader := createPod(t, withClaim(reportPod(ns, "reader", "cat /data/file > /dev/termination-log")))
	if term := terminated(t, reader); term.ExitCode != 0 || term.Message != "written-by-"+writer.Name+"\n" {
		t.Fatalf("reader: exit %d, read %q; want what the writer wrote", term.ExitCode, term.Message)
	}
	deletePodAndWait(t, reader)

	// An inline ephemeral volume: made at publish, gone with the pod.
	inline := reportPod(ns, "inline", "echo x > /scratch/f && cat /scratch/f > /dev/termination-log")
	inline.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: hostpathDriver}}}}
	inline.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	inline = createPod(t, inline)
	if term := terminated(t, inline); term.ExitCode != 0 || term.Message != "x\n" {
		t.Fatalf("inline: exit %d, %q", term.ExitCode, term.Message)
	}
	deletePodAndWait(t, inline)

	// A generic ephemeral volume: the controller makes the claim, which
	// binds to an available PV.
	csiPV(t, createCSIVolume(t, socket, "e2e-ephemeral-"+ns), nil)
	eph := reportPod(ns, "ephemeral", "echo y > /eph/f && cat /eph/f > /dev/termination-log")
	eph.Spec.Volumes = []corev1.Volume{{Name: "eph", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: claimSpec()}}}}}
	eph.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "eph", MountPath: "/eph"}}
	eph = createPod(t, eph)
	if term := terminated(t, eph); term.ExitCode != 0 || term.Message != "y\n" {
		t.Fatalf("generic ephemeral: exit %d, %q", term.ExitCode, term.Message)
	}
	deletePodAndWait(t, eph)

	waitCSIVolumesGone(t, root)
	// Its own driver's only: the cluster's hostpath driver may have staged a volume of
	// another test meanwhile.
	if m := mountsUnder(t, filepath.Join(root, "plugins", "kubernetes.io", "csi", hostpathDriver)); len(m) > 0 {
		t.Errorf("staging mounts left: %v", m)
	}
}
