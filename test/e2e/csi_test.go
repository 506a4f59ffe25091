//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
	return deployHostpathDriverNamed(t, ns, hostpathDriver, fmt.Sprintf("--fail-node-publish=%d", failPublish))
}

// deployHostpathDriverNamed deploys the hostpath-style driver under its
// own name, with extra driver flags.
func deployHostpathDriverNamed(t *testing.T, ns, hostpathDriver string, extraArgs ...string) string {
	t.Helper()
	socket, _ := deployHostpathDriverPod(t, ns, hostpathDriver, extraArgs...)
	return socket
}

// deployHostpathDriverPod is deployHostpathDriverNamed that also returns
// the driver's pod.
func deployHostpathDriverPod(t *testing.T, ns, hostpathDriver string, extraArgs ...string) (string, *corev1.Pod) {
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
					Args: append([]string{"--drivername=" + hostpathDriver, "--nodeid=" + harness.NodeName,
						"--endpoint=unix:///csi/csi.sock", "--statedir=/csi-data-dir"}, extraArgs...),
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
				hostPath("data", filepath.Join(filepath.Dir(root), "csi-data", hostpathDriver), &dirOrCreate),
				hostPath("dev", "/dev", &dir),
			},
		},
	}
	plugin := createPod(t, pod)
	// Runs before createPod's own clean-up (clean-ups run last first):
	// the volumes of the test's pods must be gone before their driver.
	t.Cleanup(func() { waitCSIVolumesGone(t, root, hostpathDriver) })
	plugin = waitPod(t, plugin, 2*time.Minute, runningAndReady)
	return filepath.Join(pluginDir, "csi.sock"), plugin
}

// restartDriverPod stops the driver pod's containers through the runtime,
// as a crash would (the registrar removes its socket as it goes), and
// waits until the agent has restarted both and the driver is registered
// again.
func restartDriverPod(t *testing.T, plugin *corev1.Pod, driver string) {
	t.Helper()
	rt, _ := framework.CRI(t)
	ctx := framework.Context(t, 2*time.Minute)
	resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(plugin.UID)}}})
	if err != nil || len(resp.Containers) != 2 {
		t.Fatalf("the driver pod's running containers: %v, %v", resp, err)
	}
	for _, c := range resp.Containers {
		if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: 5}); err != nil {
			t.Fatalf("stop %s: %v", c.Metadata.Name, err)
		}
	}
	waitPod(t, plugin, 2*time.Minute, func(p *corev1.Pod) error {
		if err := runningAndReady(p); err != nil {
			return err
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount < 1 {
				return fmt.Errorf("container %s not restarted yet", cs.Name)
			}
		}
		return nil
	})
	waitDriverRegistered(t, driver)
}

// waitDriverRegistered waits for the driver on the Node's nodeid
// annotation and on the CSINode (owned by the Node).
func waitDriverRegistered(t *testing.T, driver string) {
	t.Helper()
	cs := framework.Client(t)
	framework.Eventually(t, time.Minute, func() error {
		node, err := cs.CoreV1().Nodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ids := map[string]string{}
		_ = json.Unmarshal([]byte(node.Annotations["csi.volume.kubernetes.io/nodeid"]), &ids)
		if ids[driver] != harness.NodeName {
			return fmt.Errorf("nodeid annotation %q", node.Annotations["csi.volume.kubernetes.io/nodeid"])
		}
		csiNode, err := cs.StorageV1().CSINodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, d := range csiNode.Spec.Drivers {
			if d.Name == driver && d.NodeID == harness.NodeName {
				if ref := csiNode.OwnerReferences; len(ref) != 1 || ref[0].Kind != "Node" || ref[0].UID != node.UID {
					return fmt.Errorf("CSINode owner %+v", ref)
				}
				return nil
			}
		}
		return fmt.Errorf("CSINode drivers %+v", csiNode.Spec.Drivers)
	})
}

// waitCSIVolumesGone waits until no pod directory holds a volume of driver
// and no global directory of driver (nor a block volume's) is left: every
// volume unpublished and unstaged. Other drivers' volumes, of tests running
// alongside, do not count.
func waitCSIVolumesGone(t *testing.T, root, driver string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func() error {
		left := csiVolumeDirs(root, driver)
		staged, _ := filepath.Glob(filepath.Join(root, "plugins", "kubernetes.io", "csi", driver, "*"))
		devices, _ := filepath.Glob(filepath.Join(root, "plugins", "kubernetes.io", "csi", "volumeDevices", "*", "*"))
		staged = append(staged, devices...)
		if len(left)+len(staged) > 0 {
			return fmt.Errorf("CSI volumes left: %v %v", left, staged)
		}
		return nil
	})
}

// csiVolumeDirs lists the pods' CSI volume directories whose vol_data.json
// names driver, and those without a readable one (half made or half torn
// down: they may be anyone's).
func csiVolumeDirs(root, driver string) []string {
	dirs, _ := filepath.Glob(filepath.Join(root, "pods", "*", "volumes", "kubernetes.io~csi", "*"))
	var out []string
	for _, d := range dirs {
		var data struct {
			DriverName string `json:"driverName"`
		}
		b, err := os.ReadFile(filepath.Join(d, "vol_data.json"))
		if err != nil || json.Unmarshal(b, &data) != nil || data.DriverName == driver {
			out = append(out, d)
		}
	}
	return out
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
func createCSIVolume(t *testing.T, socket, name string, block bool) string {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctrl := csipb.NewControllerClient(conn)
	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	if block {
		capability.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
	}
	resp, err := ctrl.CreateVolume(framework.Context(t, 30*time.Second), &csipb.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csipb.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csipb.VolumeCapability{capability},
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
	return csiPVMode(t, hostpathDriver, id, claim, nil)
}

// csiPVMode is csiPV of another driver, with a volumeMode.
func csiPVMode(t *testing.T, driver, id string, claim *corev1.PersistentVolumeClaim, mode *corev1.PersistentVolumeMode) *corev1.PersistentVolume {
	t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csi-pv-"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: id}},
		},
	}
	pv.Spec.VolumeMode = mode
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
	socket, plugin := deployHostpathDriverPod(t, ns, hostpathDriver, "--fail-node-publish=2")
	waitDriverRegistered(t, hostpathDriver)

	// A claim bound ahead to a PV of a volume made through the driver.
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns}, Spec: claimSpec()}
	pv := csiPV(t, createCSIVolume(t, socket, "e2e-data-"+ns, false), claim)
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
	writerSpec.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(int64(2345))}
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
	// The driver's fsGroupPolicy is File: the pod's fsGroup owns the files.
	if fi, err := os.Stat(filepath.Join(pvDir, "mount", "file")); err != nil || fi.Sys().(*syscall.Stat_t).Gid != 2345 {
		t.Errorf("the written file's group: %v, %v; want the pod's fsGroup 2345", fi, err)
	}
	// The volume's usage, as the driver measures it, is in the Summary API
	// under the pod's volume name, with its claim.
	framework.Eventually(t, 2*time.Minute, func() error {
		summary, err := getSummary(t, "")
		if err != nil {
			return err
		}
		ps := podStatsOf(summary, ns, writer.Name)
		if ps == nil {
			return fmt.Errorf("writer not in the summary")
		}
		for _, v := range ps.VolumeStats {
			if v.Name == "data" {
				if v.PVCRef == nil || v.PVCRef.Name != "data" || v.CapacityBytes == nil || v.UsedBytes == nil {
					return fmt.Errorf("volume stats %+v", v)
				}
				return nil
			}
		}
		return fmt.Errorf("no stats of the volume %q in %+v", "data", ps.VolumeStats)
	})
	// The driver crashes and comes back while the writer runs: it registers
	// again, and the restarted driver tears the writer's volume down.
	restartDriverPod(t, plugin, hostpathDriver)
	deletePodAndWait(t, writer)
	if m := mountsUnder(t, filepath.Join(root, "pods", string(writer.UID))); len(m) > 0 {
		t.Errorf("mounts left after the writer went: %v", m)
	}

	// The next pod mounts the claim read-only: it reads, and cannot write.
	readerSpec := withClaim(reportPod(ns, "reader",
		"cat /data/file > /dev/termination-log; if touch /data/x; then echo writable >> /dev/termination-log; fi"))
	readerSpec.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = true
	reader := createPod(t, readerSpec)
	if term := terminated(t, reader); term.ExitCode != 0 || term.Message != "written-by-"+writer.Name+"\n" {
		t.Fatalf("reader: exit %d, read %q; want what the writer wrote, and no write", term.ExitCode, term.Message)
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
	csiPV(t, createCSIVolume(t, socket, "e2e-ephemeral-"+ns, false), nil)
	eph := reportPod(ns, "ephemeral", "echo y > /eph/f && cat /eph/f > /dev/termination-log")
	eph.Spec.Volumes = []corev1.Volume{{Name: "eph", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: claimSpec()}}}}}
	eph.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "eph", MountPath: "/eph"}}
	eph = createPod(t, eph)
	if term := terminated(t, eph); term.ExitCode != 0 || term.Message != "y\n" {
		t.Fatalf("generic ephemeral: exit %d, %q", term.ExitCode, term.Message)
	}
	deletePodAndWait(t, eph)

	// A raw block volume, as a device in the container.
	blockMode := corev1.PersistentVolumeBlock
	rawClaim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "raw", Namespace: ns}, Spec: claimSpec()}
	rawClaim.Spec.VolumeMode = &blockMode
	rawID := createCSIVolume(t, socket, "e2e-raw-"+ns, true)
	rawPV := csiPVMode(t, hostpathDriver, rawID, rawClaim, &blockMode)
	rawClaim.Spec.VolumeName = rawPV.Name
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(framework.Context(t, 30*time.Second), rawClaim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create block PVC: %v", err)
	}
	raw := reportPod(ns, "raw", "test -b /dev/xvda && echo hello-block | dd of=/dev/xvda conv=notrunc 2>/dev/null && "+
		"dd if=/dev/xvda bs=11 count=1 2>/dev/null > /dev/termination-log")
	raw.Spec.Volumes = []corev1.Volume{{Name: "raw", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "raw"}}}}
	raw.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "raw", DevicePath: "/dev/xvda"}}
	raw = createPod(t, raw)
	if term := terminated(t, raw); term.ExitCode != 0 || term.Message != "hello-block" {
		t.Fatalf("block volume: exit %d, read %q", term.ExitCode, term.Message)
	}
	deletePodAndWait(t, raw)

	waitCSIVolumesGone(t, root, hostpathDriver)
	// Its own driver's only: the cluster's hostpath driver may have staged a volume of
	// another test meanwhile.
	if m := append(mountsUnder(t, filepath.Join(root, "plugins", "kubernetes.io", "csi", hostpathDriver)),
		mountsUnder(t, filepath.Join(root, "plugins", "kubernetes.io", "csi", "volumeDevices", "publish", rawPV.Name))...); len(m) > 0 {
		t.Errorf("staging mounts left: %v", m)
	}
	// The block volume's loop device went with its unstaging.
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), rawID) {
			t.Errorf("loop device %s still backs %s", filepath.Dir(filepath.Dir(f)), strings.TrimSpace(string(b)))
		}
	}
}

// TestCSIAgentKilledMidCall is not parallel: the agent is SIGKILLed while
// the driver works on a NodeStageVolume, then on a NodePublishVolume, each
// of which completes after the agent is gone. The restarted agent asks
// again, the pod starts with its volume mounted once, and its teardown
// leaves nothing.
func TestCSIAgentKilledMidCall(t *testing.T) {
	requireNodeagent(t)
	cfg := framework.Cluster(t)
	ctx := framework.Context(t, 5*time.Minute)
	root := cfg.AgentRootDir()
	ns := newNamespace(t, "csi-crash")
	const driver = "crash.csi.nodeagent.dev"
	socket := deployHostpathDriverNamed(t, ns, driver, "--slow-node-calls=4s")

	for i, window := range []string{"NodeStageVolume", "NodePublishVolume"} {
		pod, pv := podOfNewVolume(t, ns, driver, socket, fmt.Sprintf("c%d", i))
		pvDir := filepath.Join(root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pv.Name)

		// The agent writes these just before it calls the driver, which then
		// takes four seconds.
		framework.Eventually(t, time.Minute, func() error {
			marker := filepath.Join(pvDir, "vol_data.json")
			if window == "NodeStageVolume" {
				found, _ := filepath.Glob(filepath.Join(root, "plugins", "kubernetes.io", "csi", driver, "*", "globalmount"))
				if len(found) > 0 {
					return nil
				}
				return fmt.Errorf("no staging directory yet")
			}
			_, err := os.Stat(marker)
			return err
		})
		sigkillAndRestartAgent(t, ctx)
		waitPod(t, pod, 2*time.Minute, runningAndReady)
		if m := mountsUnder(t, filepath.Join(pvDir, "mount")); len(m) != 1 {
			t.Errorf("killed during %s: the pod's volume is mounted %d times: %v", window, len(m), m)
		}
		deletePodAndWait(t, pod)
		if m := mountsUnder(t, filepath.Join(root, "pods", string(pod.UID))); len(m) > 0 {
			t.Errorf("killed during %s: mounts left after the pod went: %v", window, m)
		}
	}

	// A pod deleted while the driver works on its NodePublishVolume: the
	// pass is abandoned, and the volume is still torn down.
	pod, pv := podOfNewVolume(t, ns, driver, socket, "deleted")
	framework.Eventually(t, time.Minute, func() error {
		_, err := os.Stat(filepath.Join(root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pv.Name, "vol_data.json"))
		return err
	})
	deletePodAndWait(t, pod)
	if m := mountsUnder(t, filepath.Join(root, "pods", string(pod.UID))); len(m) > 0 {
		t.Errorf("deleted during NodePublishVolume: mounts left: %v", m)
	}
	if _, err := os.Lstat(filepath.Join(root, "pods", string(pod.UID))); !os.IsNotExist(err) {
		t.Errorf("deleted during NodePublishVolume: the pod's directory is left: %v", err)
	}

	waitCSIVolumesGone(t, root, driver)
	if m := mountsUnder(t, filepath.Join(root, "plugins", "kubernetes.io", "csi", driver)); len(m) > 0 {
		t.Errorf("staging mounts left: %v", m)
	}
}

// podOfNewVolume makes a volume through the driver's socket, a PV of it
// bound ahead to a claim named name, and a running pod that mounts it.
func podOfNewVolume(t *testing.T, ns, driver, socket, name string) (*corev1.Pod, *corev1.PersistentVolume) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: claimSpec()}
	pv := csiPVMode(t, driver, createCSIVolume(t, socket, name+"-"+ns, false), claim, nil)
	claim.Spec.VolumeName = pv.Name
	if _, err := framework.Client(t).CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PVC: %v", err)
	}
	spec := busyboxPod(name, corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 3600 & wait")
	spec.Namespace = ns
	spec.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name}}}}
	spec.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return createPod(t, spec), pv
}
