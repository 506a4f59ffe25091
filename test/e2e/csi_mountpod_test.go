//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/csi/mountpod"
	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

const mountPodDriver = mountpod.DefaultDriverName

// mountPodSelector finds the mount pods of test/csi/mountpod.
var mountPodSelector = mountpod.LabelApp + "=" + mountpod.LabelAppValue

// deployMountPodDriver runs the mount-pod CSI driver and its registrar as
// one privileged pod on the node, as JuiceFS's node plugin is deployed: it
// reaches the apiserver (host network, the admin kubeconfig) to make its
// mount pods in ns, and shares the pods and plugins directories both ways
// with the host and with its mount pods. A mount pod waits delay before it
// serves; NodePublishVolume waits readyTimeout for it. It returns the
// driver's state dir, where the mount pods serve their volumes.
func deployMountPodDriver(t *testing.T, ns string, delay, readyTimeout time.Duration) string {
	t.Helper()
	cluster := framework.Cluster(t)
	root := cluster.AgentRootDir()
	cs := framework.Client(t)
	ctx := framework.Context(t, time.Minute)

	driver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: mountPodDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}},
	}
	if _, err := cs.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CSIDriver: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.StorageV1().CSIDrivers().Delete(context.Background(), mountPodDriver, metav1.DeleteOptions{})
	})

	pluginDir := filepath.Join(root, "plugins", mountPodDriver)
	// Below the agent's root dir, which the agent makes a shared mount:
	// what a mount pod mounts there reaches the host and the driver.
	stateDir := filepath.Join(pluginDir, "volumes")
	bidi, hostToContainer := corev1.MountPropagationBidirectional, corev1.MountPropagationHostToContainer
	dirOrCreate, dir, file := corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory, corev1.HostPathFile
	hostPath := func(name, path string, typ *corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: typ}}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csi-mountpod-", Namespace: ns},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []corev1.Container{
				{
					Name:  "mountpod",
					Image: harness.CSIMountPodImage,
					Args: []string{"--drivername=" + mountPodDriver, "--nodeid=" + harness.NodeName,
						"--endpoint=unix:///csi/csi.sock", "--statedir=" + stateDir, "--kubeconfig=/etc/csi-mountpod/kubeconfig",
						"--mount-namespace=" + ns, "--mount-image=" + harness.BusyboxE2EImage,
						"--mount-pod-delay=" + delay.String(), "--ready-timeout=" + readyTimeout.String(), "--v=2"},
					SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "socket-dir", MountPath: "/csi"},
						{Name: "pods", MountPath: filepath.Join(root, "pods"), MountPropagation: &bidi},
						{Name: "plugins", MountPath: filepath.Join(root, "plugins"), MountPropagation: &bidi},
						{Name: "kubeconfig", MountPath: "/etc/csi-mountpod/kubeconfig", ReadOnly: true},
					},
				},
				{
					Name:  "registrar",
					Image: harness.CSIRegistrarImage,
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
				hostPath("kubeconfig", cluster.Kubeconfig(), &file),
			},
		},
	}
	plugin := createPod(t, pod)
	// Runs before createPod's own clean-up (clean-ups run last first): the
	// driver must outlive its volumes and their mount pods.
	t.Cleanup(func() { waitMountPodVolumesGone(t, root, ns, stateDir) })
	waitPod(t, plugin, 2*time.Minute, runningAndReady)
	framework.Eventually(t, time.Minute, func() error {
		csiNode, err := cs.StorageV1().CSINodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, d := range csiNode.Spec.Drivers {
			if d.Name == mountPodDriver {
				return nil
			}
		}
		return fmt.Errorf("%s not in CSINode drivers %+v", mountPodDriver, csiNode.Spec.Drivers)
	})
	return stateDir
}

// waitMountPodVolumesGone waits until the driver's volumes are unpublished,
// its mount pods in ns are gone and its state dir is empty. A mount the
// driver failed to clean up is an error, and is unmounted so that the
// machine is left clean.
func waitMountPodVolumesGone(t *testing.T, root, ns, stateDir string) {
	t.Helper()
	waitCSIVolumesGone(t, root, mountPodDriver)
	framework.Eventually(t, 2*time.Minute, func() error {
		list, err := framework.Client(t).CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: mountPodSelector})
		if err != nil {
			return err
		}
		entries, _ := os.ReadDir(stateDir)
		if len(list.Items)+len(entries) > 0 {
			return fmt.Errorf("%d mount pods and %d volume dirs left", len(list.Items), len(entries))
		}
		return nil
	})
	if left := mountsUnder(t, stateDir); len(left) > 0 {
		t.Errorf("mounts left under the driver's state dir: %v", left)
		for i := len(left) - 1; i >= 0; i-- {
			if err := unix.Unmount(left[i], unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", left[i], err)
			}
		}
	}
}

// TestCSIMountPod is the seed's JuiceFS scenario: the node plugin's
// NodePublishVolume makes a "mount pod" on the node through the apiserver,
// waits until it is Ready, and bind-mounts what it serves into the pod.
// Two pods share one PV through one mount pod and see each other's data;
// while the mount pod is slow to start (longer than the driver waits, so
// the agent hears Unavailable and retries), another pod on the node starts
// and runs, and a pod deleted while its publish waits takes its own mount
// pod along; when the last user goes, so does the mount pod, and nothing
// stays mounted.
func TestCSIMountPod(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	ns := newNamespace(t, "csi-mountpod")
	root := framework.Cluster(t).AgentRootDir()
	cs := framework.Client(t)
	const delay, readyTimeout = 20 * time.Second, 10 * time.Second
	stateDir := deployMountPodDriver(t, ns, delay, readyTimeout)

	pv := mountPodClaim(t, ns, "shared")

	// Two business pods on the claim: the writer leaves a file, the reader
	// copies what it finds; each is ready once its file is there.
	user := func(prefix, claim, script, readyFile string) *corev1.Pod {
		p := busyboxPod(prefix, corev1.RestartPolicyAlways, "trap 'exit 0' TERM; "+script+"; sleep 3600 & wait")
		p.Namespace = ns
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-s", readyFile}}}}
		return p
	}
	start := time.Now()
	writer := createPod(t, user("writer", "shared", "echo written-by-$HOSTNAME > /data/from-writer", "/data/from-writer"))
	reader := createPod(t, user("reader", "shared", "until [ -s /data/from-writer ]; do sleep 0.2; done; cp /data/from-writer /data/reader-saw", "/data/reader-saw"))
	t.Cleanup(func() { dumpOnFailure(t, ns) })

	// The driver made the mount pod, which is not serving yet.
	mp := waitMountPod(t, ns, pv.Spec.CSI.VolumeHandle)
	mountPodSeen := time.Since(start)
	if mp.Spec.NodeName != harness.NodeName || mp.Annotations[mountpod.AnnotationHandle] != pv.Spec.CSI.VolumeHandle {
		t.Errorf("mount pod %s on node %q for volume %q", mp.Name, mp.Spec.NodeName, mp.Annotations[mountpod.AnnotationHandle])
	}

	// Meanwhile an ordinary pod starts and runs: the agent does not wait for
	// the business pods' volumes to run anything else.
	bystander := busyboxPod("bystander", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 3600 & wait")
	bystander.Namespace = ns
	waitPod(t, createPod(t, bystander), time.Minute, runningAndReady)
	bystanderUp := time.Since(start)
	for _, p := range []*corev1.Pod{writer, reader} {
		got, err := cs.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != corev1.PodPending {
			t.Errorf("%s is %s before its mount pod could serve (%v after it was made, mount pod delay %v)", p.Name, got.Status.Phase, bystanderUp, delay)
		}
	}

	// A pod deleted while its publish waits takes its mount pod along: the
	// agent lets the call in flight return (CSI allows one per volume; here
	// the driver's ready timeout ends it), then unpublishes what it began,
	// and the driver deletes a mount pod that has no user.
	quitPV := mountPodClaim(t, ns, "quit")
	quitter := createPod(t, user("quitter", "quit", "true", "/data/never"))
	quitMP := waitMountPod(t, ns, quitPV.Spec.CSI.VolumeHandle)
	deletePodAndWait(t, quitter)
	framework.Eventually(t, time.Minute, func() error {
		if got, err := cs.CoreV1().Pods(ns).Get(context.Background(), quitMP.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("mount pod %s of the deleted pod is still there (phase %s, users %q)", got.Name, got.Status.Phase, mountpod.Users(got))
		}
		return nil
	})
	quitterGone := time.Since(start)

	writer = waitPod(t, writer, 2*time.Minute, runningAndReady)
	reader = waitPod(t, reader, 2*time.Minute, runningAndReady)
	usersUp := time.Since(start)
	mpNow, err := cs.CoreV1().Pods(ns).Get(context.Background(), mp.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("mount pod: %v", err)
	}
	mountPodReady := "?"
	for _, c := range mpNow.Status.Conditions {
		if c.Type == corev1.PodReady {
			mountPodReady = c.LastTransitionTime.Sub(start).Round(time.Second).String()
		}
	}
	t.Logf("mount pod seen after %v, bystander running after %v, the quitter and its mount pod gone after %v, mount pod Ready at %s, both users running after %v",
		mountPodSeen.Round(100*time.Millisecond), bystanderUp.Round(100*time.Millisecond), quitterGone.Round(100*time.Millisecond),
		mountPodReady, usersUp.Round(100*time.Millisecond))
	if bystanderUp >= usersUp {
		t.Errorf("the bystander ran after the business pods (%v, %v)", bystanderUp, usersUp)
	}

	// One mount pod, two users, one file system.
	list, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: mountPodSelector})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].UID != mp.UID {
		t.Fatalf("%d mount pods; want the one made first (%s)", len(list.Items), mp.Name)
	}
	if n := len(mountpod.Users(&list.Items[0])); n != 2 {
		t.Errorf("mount pod records %d users, want 2: %v", n, list.Items[0].Annotations)
	}
	targetOf := func(p *corev1.Pod) string {
		return filepath.Join(root, "pods", string(p.UID), "volumes", "kubernetes.io~csi", pv.Name, "mount")
	}
	if b, err := os.ReadFile(filepath.Join(targetOf(reader), "reader-saw")); err != nil || string(b) != "written-by-"+writer.Name+"\n" {
		t.Errorf("the reader saw %q (%v); want what the writer wrote", b, err)
	}
	for _, p := range []*corev1.Pod{writer, reader} {
		if m := mountInfo(t, targetOf(p)); m == "" || !strings.HasPrefix(m, "rw") {
			t.Errorf("%s's volume: mount options %q, want mounted read-write", p.Name, m)
		}
	}
	// The first publish outlasted the driver's wait: the agent said why and
	// retried.
	ev := append(podEvents(t, writer), podEvents(t, reader)...)
	if !hasEvent(ev, "FailedMount", "not ready") {
		t.Errorf("no FailedMount event saying the mount pod was not ready; events: %s", eventSummary(ev))
	}

	// The first user leaves: the mount pod stays for the other.
	deletePodAndWait(t, writer)
	mpNow, err = cs.CoreV1().Pods(ns).Get(context.Background(), mp.Name, metav1.GetOptions{})
	if err != nil || mpNow.UID != mp.UID || mpNow.DeletionTimestamp != nil {
		t.Fatalf("mount pod after one user left: %v", err)
	}
	if n := len(mountpod.Users(mpNow)); n != 1 {
		t.Errorf("mount pod records %d users after one left, want 1", n)
	}
	if b, err := os.ReadFile(filepath.Join(targetOf(reader), "from-writer")); err != nil || string(b) != "written-by-"+writer.Name+"\n" {
		t.Errorf("after the writer left, its file reads %q (%v)", b, err)
	}

	// The last user leaves: the mount pod goes (the driver waits for it
	// within NodeUnpublishVolume), and nothing stays mounted.
	deletePodAndWait(t, reader)
	framework.Eventually(t, time.Minute, func() error {
		if _, err := cs.CoreV1().Pods(ns).Get(context.Background(), mp.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("mount pod %s still there", mp.Name)
		}
		return nil
	})
	t.Logf("all gone after %v", time.Since(start).Round(100*time.Millisecond))
	for _, p := range []*corev1.Pod{writer, reader} {
		if m := mountsUnder(t, filepath.Join(root, "pods", string(p.UID))); len(m) > 0 {
			t.Errorf("mounts left after %s went: %v", p.Name, m)
		}
	}
	if m := mountsUnder(t, filepath.Join(root, "plugins", mountPodDriver)); len(m) > 0 {
		t.Errorf("mounts left in the driver's directory: %v", m)
	}
	if entries, _ := os.ReadDir(stateDir); len(entries) > 0 {
		t.Errorf("volume directories left in %s: %d", stateDir, len(entries))
	}
}

// mountPodClaim makes a PersistentVolume of the mount-pod driver, with a
// handle of its own, and a ReadWriteMany claim in ns bound to it.
func mountPodClaim(t *testing.T, ns, name string) *corev1.PersistentVolume {
	t.Helper()
	cs := framework.Client(t)
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: claimSpec()}
	claim.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "mountpod-pv-"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: mountPodDriver, VolumeHandle: name + "-" + ns}},
		},
	}
	pv, err := cs.CoreV1().PersistentVolumes().Create(framework.Context(t, 30*time.Second), pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create PV: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	claim.Spec.VolumeName = pv.Name
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(framework.Context(t, 30*time.Second), claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PVC: %v", err)
	}
	return pv
}

// waitMountPod waits until the driver has made the mount pod of the volume
// handle in ns, and returns it.
func waitMountPod(t *testing.T, ns, handle string) corev1.Pod {
	t.Helper()
	var mp corev1.Pod
	framework.Eventually(t, time.Minute, func() error {
		list, err := framework.Client(t).CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: mountPodSelector})
		if err != nil {
			return err
		}
		var found []corev1.Pod
		for _, p := range list.Items {
			if p.Annotations[mountpod.AnnotationHandle] == handle {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			return fmt.Errorf("%d mount pods for volume %s", len(found), handle)
		}
		mp = found[0]
		return nil
	})
	return mp
}

// dumpOnFailure logs, when the test failed, what explains it: the pods of
// ns, the namespace's events, the CSI drivers' logs and the agent's log
// lines about ns.
func dumpOnFailure(t *testing.T, ns string) {
	if !t.Failed() {
		return
	}
	cs := framework.Client(t)
	ctx := framework.Context(t, 30*time.Second)
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("list pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s: %s %s", p.Name, p.Status.Phase, describeStatuses(p.Status.ContainerStatuses))
		if !strings.HasPrefix(p.Name, "csi-mountpod-") {
			continue
		}
		for _, c := range p.Spec.Containers {
			b, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
			t.Logf("logs of %s/%s (%v):\n%s", p.Name, c.Name, err, b)
		}
	}
	if ev, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Logf("events:\n%s", eventSummary(ev.Items))
	}
	b, _ := os.ReadFile(filepath.Join(framework.Cluster(t).LogDir(), "agent.log"))
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, ns) || strings.Contains(l, mountPodDriver) {
			lines = append(lines, l)
		}
	}
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	t.Logf("agent log lines about %s:\n%s", ns, strings.Join(lines, "\n"))
}
