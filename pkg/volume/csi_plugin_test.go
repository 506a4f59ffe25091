package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
	"github.com/nodeagent/nodeagent/pkg/volume/csi"
	"github.com/nodeagent/nodeagent/pkg/volume/csi/csitest"
)

type noNodeInfo struct{}

func (noNodeInfo) AddDriver(context.Context, *csi.Driver) error { return nil }
func (noNodeInfo) RemoveDriver(context.Context, string) error   { return nil }

const testDriver = "fake.csi.dev"

// csiFixture is a Manager with the CSI plugin, a fake driver served over
// gRPC that "mounts" into the fake mount table, and API objects.
type csiFixture struct {
	sock   string
	mgr    *Manager
	driver *csitest.Driver
	fm     *fakeMounter
	client *fake.Clientset
	reg    *csi.Registry
	root   string
}

func newCSIFixture(t *testing.T, register bool, objects ...runtime.Object) *csiFixture {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "csip")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	fm := &fakeMounter{}
	drv := &csitest.Driver{Name: testDriver, NodeID: "node-a", Stage: true,
		OnPublish: func(r *csipb.NodePublishVolumeRequest) {
			_ = fm.mount(r.GetStagingTargetPath(), r.GetTargetPath(), "bind", 0, "")
		},
		OnUnpublish: func(r *csipb.NodeUnpublishVolumeRequest) { _ = fm.unmount(r.GetTargetPath()) },
	}
	sock := filepath.Join(sockDir, "csi.sock")
	csitest.Serve(t, sock, drv)
	reg := csi.NewRegistry(noNodeInfo{})
	if register {
		if err := reg.Register(context.Background(), testDriver, sock, []string{"1.0.0"}); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset(objects...)
	mgr, err := NewManager(Config{RootDir: t.TempDir(), Client: kubetest.Wrap(client), NodeName: "node-a", HugePagesDir: t.TempDir(),
		CSIDrivers: reg, mounter: fm})
	if err != nil {
		t.Fatal(err)
	}
	// A pass that finds no attachment fails at once here; the wait itself
	// has its own test.
	mgr.pluginByName(csiPluginName).(*csiPlugin).attachWait = 0
	return &csiFixture{sock: sock, mgr: mgr, driver: drv, fm: fm, client: client, reg: reg, root: mgr.layout.Root()}
}

func csiDriverObject(attach, podInfo bool, modes ...storagev1.VolumeLifecycleMode) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: &attach, PodInfoOnMount: &podInfo, VolumeLifecycleModes: modes}}
}

func boundClaim(name, pv string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("pvc-uid-" + name)},
		Spec:   v1.PersistentVolumeClaimSpec{VolumeName: pv},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}
	vol := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			ClaimRef:    &v1.ObjectReference{Namespace: "ns", Name: name, UID: pvc.UID},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: testDriver, VolumeHandle: "handle-" + pv, VolumeAttributes: map[string]string{"k": "v"}}},
		}}
	return pvc, vol
}

func claimPod(uid, claim string) *v1.Pod {
	return basePod(func(p *v1.Pod) {
		p.UID = types.UID(uid)
		p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	})
}

// TestCSIClaimStagedOncePublishedPerPod: two pods of one claim: the volume
// is staged once in its global directory and published into each pod's
// directory named after the PV; a later sync calls nothing; the first pod's
// teardown unpublishes only, the last one unstages too, and nothing is left.
func TestCSIClaimStagedOncePublishedPerPod(t *testing.T) {
	pvc, pv := boundClaim("claim", "pv-1")
	f := newCSIFixture(t, true, pvc, pv, csiDriverObject(false, false))
	ctx := context.Background()
	podA, podB := claimPod("uid-a", "claim"), claimPod("uid-b", "claim")

	mounts, err := f.mgr.MountPod(ctx, podA)
	if err != nil {
		t.Fatal(err)
	}
	targetA := filepath.Join(f.root, "pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount")
	if m := mounts["data"]; m.HostPath != targetA || m.ReadOnly || m.Plugin != csiPluginName {
		t.Fatalf("mount = %+v, want %s", m, targetA)
	}
	if _, err := f.mgr.MountPod(ctx, podA); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mgr.MountPod(ctx, podB); err != nil {
		t.Fatal(err)
	}
	if got := f.mgr.VolumesInUse(); len(got) != 0 {
		t.Fatalf("volumes of a driver without attachment reported in use: %v", got)
	}
	want := []string{"NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1", "NodePublishVolume handle-pv-1"}
	if got := f.driver.Calls(); !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	stage := f.driver.Last("NodeStageVolume").(*csipb.NodeStageVolumeRequest)
	gdir := f.mgr.plugins[len(f.mgr.plugins)-1].(*csiPlugin).stagingDir(testDriver, "handle-pv-1")
	if stage.GetStagingTargetPath() != filepath.Join(gdir, "globalmount") ||
		!strings.HasPrefix(gdir, filepath.Join(f.root, "plugins/kubernetes.io/csi/fake.csi.dev/")) ||
		stage.GetVolumeCapability().GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Fatalf("stage request = %v (global dir %s)", stage, gdir)
	}
	pub := f.driver.Last("NodePublishVolume").(*csipb.NodePublishVolumeRequest)
	if pub.GetStagingTargetPath() != stage.GetStagingTargetPath() || pub.GetVolumeContext()["k"] != "v" ||
		pub.GetVolumeContext()[ctxPodName] != "" {
		t.Fatalf("publish request = %v", pub)
	}
	data, err := readVolData(filepath.Dir(targetA))
	if err != nil || data.DriverName != testDriver || data.VolumeHandle != "handle-pv-1" || data.SpecVolID != "pv-1" ||
		data.NodeName != "node-a" || data.VolumeLifecycleMode != "Persistent" {
		t.Fatalf("vol_data.json = %+v, %v", data, err)
	}

	if err := f.mgr.UnmountPod(ctx, "uid-a"); err != nil {
		t.Fatal(err)
	}
	if got := f.driver.Calls()[3:]; !slices.Equal(got, []string{"NodeUnpublishVolume handle-pv-1"}) {
		t.Fatalf("calls after the first teardown = %v", got)
	}
	if err := f.mgr.UnmountPod(ctx, "uid-b"); err != nil {
		t.Fatal(err)
	}
	if got := f.driver.Calls()[4:]; !slices.Equal(got, []string{"NodeUnpublishVolume handle-pv-1", "NodeUnstageVolume handle-pv-1"}) {
		t.Fatalf("calls after the last teardown = %v", got)
	}
	for _, p := range []string{filepath.Join(f.root, "pods/uid-a"), filepath.Join(f.root, "pods/uid-b"), gdir} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
	if mps, _ := f.fm.mountPoints(""); len(mps) != 0 {
		t.Errorf("mounts left: %v", mps)
	}
}

// TestCSIVolumeFailures: each volume that cannot be set up fails with the
// reason the kubelet gives, and a publish that failed is retried.
func TestCSIVolumeFailures(t *testing.T) {
	ctx := context.Background()
	t.Run("driver not registered", func(t *testing.T) {
		pvc, pv := boundClaim("claim", "pv-1")
		f := newCSIFixture(t, false, pvc, pv)
		_, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim"))
		if err == nil || !strings.Contains(err.Error(), `MountVolume.SetUp failed for volume "data" : driver name fake.csi.dev not found in the list of registered CSI drivers`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("claim not bound", func(t *testing.T) {
		pvc, pv := boundClaim("claim", "pv-1")
		pvc.Status.Phase, pvc.Spec.VolumeName = v1.ClaimPending, ""
		f := newCSIFixture(t, true, pvc, pv)
		_, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim"))
		if err == nil || !strings.Contains(err.Error(), `PVC ns/claim has non-bound phase ("Pending")`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing claim", func(t *testing.T) {
		f := newCSIFixture(t, true)
		_, err := f.mgr.MountPod(ctx, claimPod("uid-a", "nope"))
		if err == nil || !strings.Contains(err.Error(), `persistentvolumeclaims "nope" not found`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("not attached yet, then attached", func(t *testing.T) {
		pvc, pv := boundClaim("claim", "pv-1")
		f := newCSIFixture(t, true, pvc, pv) // no CSIDriver: attachRequired defaults to true
		pod := claimPod("uid-a", "claim")
		_, err := f.mgr.MountPod(ctx, pod)
		if err == nil || !strings.Contains(err.Error(), "is not attached yet") || len(f.driver.Calls()) != 0 {
			t.Fatalf("err = %v, calls %v", err, f.driver.Calls())
		}
		// Reported in use while it waits, as the kubelet reports what it
		// is about to mount: never detached under a mount.
		if got := f.mgr.VolumesInUse(); !slices.Equal(got, []v1.UniqueVolumeName{"kubernetes.io/csi/fake.csi.dev^handle-pv-1"}) {
			t.Fatalf("volumes in use while waiting for the attachment = %v", got)
		}
		va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: attachmentName("handle-pv-1", testDriver, "node-a")},
			Status: storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"dev": "/dev/x"}}}
		if _, err := f.client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.mgr.MountPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if pub := f.driver.Last("NodePublishVolume").(*csipb.NodePublishVolumeRequest); pub.GetPublishContext()["dev"] != "/dev/x" {
			t.Fatalf("publish context = %v", pub.GetPublishContext())
		}
		data, _ := readVolData(filepath.Join(f.root, "pods/uid-a/volumes/kubernetes.io~csi/pv-1"))
		if data.AttachmentID != va.Name {
			t.Fatalf("attachment ID = %q, want %q", data.AttachmentID, va.Name)
		}
		if got := f.mgr.VolumesInUse(); !slices.Equal(got, []v1.UniqueVolumeName{"kubernetes.io/csi/fake.csi.dev^handle-pv-1"}) {
			t.Fatalf("volumes in use = %v", got)
		}
		if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
			t.Fatal(err)
		}
		if got := f.mgr.VolumesInUse(); len(got) != 0 {
			t.Fatalf("volumes in use after teardown = %v", got)
		}
	})
	t.Run("attachment not made yet, as the Node authorizer says it", func(t *testing.T) {
		pvc, pv := boundClaim("claim", "pv-1")
		f := newCSIFixture(t, true, pvc, pv)
		f.client.PrependReactor("get", "volumeattachments", func(action clienttesting.Action) (bool, runtime.Object, error) {
			name := action.(clienttesting.GetAction).GetName()
			return true, nil, apierrors.NewForbidden(storagev1.Resource("volumeattachments"), name,
				errors.New("no relationship found between node 'node-a' and this object"))
		})
		_, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim"))
		if err == nil || !strings.Contains(err.Error(), "is not attached yet") || len(f.driver.Calls()) != 0 {
			t.Fatalf("err = %v, calls %v", err, f.driver.Calls())
		}
		// Reported in use while it waits, as the kubelet reports what it
		// is about to mount: never detached under a mount.
		if got := f.mgr.VolumesInUse(); !slices.Equal(got, []v1.UniqueVolumeName{"kubernetes.io/csi/fake.csi.dev^handle-pv-1"}) {
			t.Fatalf("volumes in use while waiting for the attachment = %v", got)
		}
	})
	t.Run("attachment being detached", func(t *testing.T) {
		pvc, pv := boundClaim("claim", "pv-1")
		f := newCSIFixture(t, true, pvc, pv)
		now := metav1.Now()
		va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: attachmentName("handle-pv-1", testDriver, "node-a"),
			DeletionTimestamp: &now, Finalizers: []string{"external-attacher/fake-csi-dev"}},
			Status: storagev1.VolumeAttachmentStatus{Attached: true}}
		if _, err := f.client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim"))
		if err == nil || !strings.Contains(err.Error(), "is being detached") || len(f.driver.Calls()) != 0 {
			t.Fatalf("err = %v, calls %v", err, f.driver.Calls())
		}
	})
	t.Run("publish fails then succeeds", func(t *testing.T) {
		pvc, pv := boundClaim("claim", "pv-1")
		f := newCSIFixture(t, true, pvc, pv, csiDriverObject(false, false))
		f.driver.FailPublish = 1
		pod := claimPod("uid-a", "claim")
		if _, err := f.mgr.MountPod(ctx, pod); err == nil || !strings.Contains(err.Error(), "injected publish failure") {
			t.Fatalf("err = %v", err)
		}
		if _, err := f.mgr.MountPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		want := []string{"NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1", "NodePublishVolume handle-pv-1"}
		if got := f.driver.Calls(); !slices.Equal(got, want) {
			t.Fatalf("calls = %v, want %v", got, want)
		}
	})
	t.Run("inline volume of a driver without the Ephemeral mode", func(t *testing.T) {
		f := newCSIFixture(t, true, csiDriverObject(false, true))
		pod := basePod(func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: testDriver}}}}
		})
		if _, err := f.mgr.MountPod(ctx, pod); err == nil || !strings.Contains(err.Error(), `volume mode "Ephemeral" not supported by driver fake.csi.dev`) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestCSIInlineVolume: an inline volume is published alone (no stage, no
// attachment) with the pod's information in its context, read-only when
// asked, and torn down with the pod.
func TestCSIInlineVolume(t *testing.T) {
	ctx := context.Background()
	f := newCSIFixture(t, true, csiDriverObject(true, true, storagev1.VolumeLifecycleEphemeral))
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
			Driver: testDriver, ReadOnly: ptr(true), VolumeAttributes: map[string]string{"size": "1Mi"}}}}}
	})
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if m := mounts["scratch"]; !m.ReadOnly || m.HostPath != filepath.Join(f.root, "pods/uid-1/volumes/kubernetes.io~csi/scratch/mount") {
		t.Fatalf("mount = %+v", m)
	}
	calls := f.driver.Calls()
	if len(calls) != 1 || !strings.HasPrefix(calls[0], "NodePublishVolume csi-") {
		t.Fatalf("calls = %v", calls)
	}
	pub := f.driver.Last("NodePublishVolume").(*csipb.NodePublishVolumeRequest)
	vc := pub.GetVolumeContext()
	if !pub.GetReadonly() || pub.GetStagingTargetPath() != "" || vc[ctxEphemeral] != "true" || vc[ctxPodName] != "web" ||
		vc[ctxPodNamespace] != "ns" || vc[ctxPodUID] != "uid-1" || vc[ctxServiceAccount] != "builder" || vc["size"] != "1Mi" {
		t.Fatalf("publish request = %v", pub)
	}
	if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if got := f.driver.Calls(); len(got) != 2 || !strings.HasPrefix(got[1], "NodeUnpublishVolume csi-") {
		t.Fatalf("calls = %v", got)
	}
}

// TestCSITeardownAfterTheDriverForgot: a driver that answers NodeUnpublish
// with NotFound no longer has the volume, so the pod's directory goes; any
// other error keeps it for the next try.
func TestCSITeardownAfterTheDriverForgot(t *testing.T) {
	ctx := context.Background()
	f := newCSIFixture(t, true, csiDriverObject(false, false, storagev1.VolumeLifecycleEphemeral))
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: testDriver}}}}
	})
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(f.root, "pods/uid-1/volumes/kubernetes.io~csi/scratch")
	f.driver.UnpublishErr = status.Error(codes.Internal, "driver trouble")
	if err := f.mgr.UnmountPod(ctx, pod.UID); err == nil || !strings.Contains(err.Error(), "driver trouble") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, volDataFile)); err != nil {
		t.Fatalf("vol_data.json gone after a failed unpublish: %v", err)
	}
	f.driver.UnpublishErr = status.Error(codes.NotFound, "no such volume")
	if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(f.root, "pods/uid-1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pod directory left: %v", err)
	}
}

// TestCSIBlockVolume: a PV of volumeMode Block is staged and published in
// the kubelet's volumeDevices places, handed over as a device, and torn
// down from there.
func TestCSIBlockVolume(t *testing.T) {
	ctx := context.Background()
	pvc, pv := boundClaim("raw", "pv-b")
	block := v1.PersistentVolumeBlock
	pv.Spec.VolumeMode = &block
	f := newCSIFixture(t, true, pvc, pv, csiDriverObject(false, false))
	pod := claimPod("uid-a", "raw")
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	publish := filepath.Join(f.root, "plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/uid-a")
	if m := mounts["data"]; !m.Block || m.HostPath != publish {
		t.Fatalf("mount = %+v, want the device at %s", m, publish)
	}
	stage := f.driver.Last("NodeStageVolume").(*csipb.NodeStageVolumeRequest)
	pub := f.driver.Last("NodePublishVolume").(*csipb.NodePublishVolumeRequest)
	if stage.GetStagingTargetPath() != filepath.Join(f.root, "plugins/kubernetes.io/csi/volumeDevices/staging/pv-b") ||
		stage.GetVolumeCapability().GetBlock() == nil || pub.GetVolumeCapability().GetBlock() == nil || pub.GetTargetPath() != publish {
		t.Fatalf("stage %v, publish %v", stage, pub)
	}
	if _, err := f.mgr.MountPod(ctx, pod); err != nil || len(f.driver.Calls()) != 2 {
		t.Fatalf("second sync: %v, calls %v", err, f.driver.Calls())
	}
	if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if got := f.driver.Calls()[2:]; !slices.Equal(got, []string{"NodeUnpublishVolume handle-pv-b", "NodeUnstageVolume handle-pv-b"}) {
		t.Fatalf("teardown calls = %v", got)
	}
	for _, p := range []string{"pods/uid-a", "plugins/kubernetes.io/csi/volumeDevices/publish/pv-b",
		"plugins/kubernetes.io/csi/volumeDevices/staging/pv-b", "plugins/kubernetes.io/csi/volumeDevices/pv-b"} {
		if _, err := os.Lstat(filepath.Join(f.root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
}

// TestCSIVolumeStats: a published volume is listed for the stats under its
// pod volume name with its PV-named target, measured by the driver.
func TestCSIVolumeStats(t *testing.T) {
	ctx := context.Background()
	pvc, pv := boundClaim("claim", "pv-1")
	f := newCSIFixture(t, false, pvc, pv, csiDriverObject(false, false))
	f.driver.Stats = true
	if err := f.mgr.pluginByName(csiPluginName).(*csiPlugin).drivers.Register(ctx, testDriver, f.sock, []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	pod := claimPod("uid-a", "claim")
	if dirs := f.mgr.VolumeDirs(pod); len(dirs) != 0 {
		t.Fatalf("volume listed before it is published: %+v", dirs)
	}
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	dirs := f.mgr.VolumeDirs(pod)
	if len(dirs) != 1 || dirs[0].Name != "data" || dirs[0].Path != filepath.Join(f.root, "pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount") || dirs[0].Usage == nil {
		t.Fatalf("volume dirs = %+v", dirs)
	}
	u, err := dirs[0].Usage(ctx)
	if err != nil || u != (VolumeUsage{CapacityBytes: 4096, AvailableBytes: 3096, UsedBytes: 1000, Inodes: 64, InodesFree: 61, InodesUsed: 3}) {
		t.Fatalf("usage = %+v, %v", u, err)
	}
	req := f.driver.Last("NodeGetVolumeStats").(*csipb.NodeGetVolumeStatsRequest)
	if req.GetVolumePath() != dirs[0].Path || !strings.HasSuffix(req.GetStagingTargetPath(), "/globalmount") {
		t.Fatalf("stats request = %v", req)
	}
	if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if dirs := f.mgr.VolumeDirs(pod); len(dirs) != 0 {
		t.Fatalf("volume listed after teardown: %+v", dirs)
	}
}

// TestCSITokensAndRepublish: a driver whose CSIDriver asks for tokens gets
// them in the volume context, bound to the pod, and with requiresRepublish
// is called again at every sync; without it, a sync of a published volume
// asks the apiserver nothing.
func TestCSITokensAndRepublish(t *testing.T) {
	ctx := context.Background()
	pvc, pv := boundClaim("claim", "pv-1")
	drv := csiDriverObject(false, false)
	drv.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "vault", ExpirationSeconds: ptr(int64(3600))}}
	drv.Spec.RequiresRepublish = ptr(true)
	f := newCSIFixture(t, true, pvc, pv, drv)
	tr := &tokenReactor{clock: testclock.NewFakeClock(time.Now())}
	f.client.PrependReactor("create", "serviceaccounts", tr.react)
	pod := claimPod("uid-a", "claim")
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pub := f.driver.Last("NodePublishVolume").(*csipb.NodePublishVolumeRequest)
	var tokens map[string]struct {
		Token               string    `json:"token"`
		ExpirationTimestamp time.Time `json:"expirationTimestamp"`
	}
	if err := json.Unmarshal([]byte(pub.GetVolumeContext()[ctxTokens]), &tokens); err != nil || tokens["vault"].Token == "" ||
		tokens["vault"].ExpirationTimestamp.IsZero() || tr.count() != 1 {
		t.Fatalf("tokens in the volume context: %q (%v), %d requests", pub.GetVolumeContext()[ctxTokens], err, tr.count())
	}
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := f.driver.Calls(); !slices.Equal(got, []string{"NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1", "NodePublishVolume handle-pv-1"}) {
		t.Fatalf("calls = %v, want a republish", got)
	}

	// Without requiresRepublish, a later sync reads nothing from the API.
	pvc2, pv2 := boundClaim("other", "pv-2")
	g := newCSIFixture(t, true, pvc2, pv2, csiDriverObject(false, false))
	pod2 := claimPod("uid-b", "other")
	if _, err := g.mgr.MountPod(ctx, pod2); err != nil {
		t.Fatal(err)
	}
	before := len(g.client.Actions())
	if _, err := g.mgr.MountPod(ctx, pod2); err != nil {
		t.Fatal(err)
	}
	if after := g.client.Actions(); len(after) != before || len(g.driver.Calls()) != 2 {
		t.Fatalf("a sync of a published volume made API calls %v and driver calls %v", after[before:], g.driver.Calls())
	}
}

// TestCSIVolumesOfAPodPublishSideBySide: a pod's second volume is published
// while its first one's NodePublishVolume still waits.
func TestCSIVolumesOfAPodPublishSideBySide(t *testing.T) {
	ctx := context.Background()
	pvcA, pvA := boundClaim("a", "pv-a")
	pvcB, pvB := boundClaim("b", "pv-b")
	f := newCSIFixture(t, true, pvcA, pvA, pvcB, pvB, csiDriverObject(false, false))
	bPublished := make(chan struct{})
	waited := make(chan bool, 1)
	f.driver.OnPublish = func(r *csipb.NodePublishVolumeRequest) {
		switch r.GetVolumeId() {
		case "handle-pv-a":
			select {
			case <-bPublished:
				waited <- true
			case <-time.After(10 * time.Second):
				waited <- false
			}
		case "handle-pv-b":
			close(bPublished)
		}
		_ = f.fm.mount("", r.GetTargetPath(), "bind", 0, "")
	}
	pod := basePod(func(p *v1.Pod) {
		p.UID = "uid-a"
		for _, c := range []string{"a", "b"} {
			p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: c, VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
		}
	})
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil || len(mounts) != 2 {
		t.Fatalf("mounts %v, %v", mounts, err)
	}
	if !<-waited {
		t.Fatal("volume b was not published while volume a's publish waited")
	}
}

// TestCSITokensInSecrets: with serviceAccountTokenInSecrets the tokens
// reach the driver in NodePublishVolume's secrets, beside the publish
// secret's own keys, and not in its volume context.
func TestCSITokensInSecrets(t *testing.T) {
	for _, inSecrets := range []bool{false, true} {
		t.Run(fmt.Sprintf("inSecrets=%v", inSecrets), func(t *testing.T) {
			ctx := context.Background()
			pvc, pv := boundClaim("claim", "pv-1")
			pv.Spec.CSI.NodePublishSecretRef = &v1.SecretReference{Namespace: "ns", Name: "publish"}
			secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "publish"}, Data: map[string][]byte{"user": []byte("u")}}
			drv := csiDriverObject(false, false)
			drv.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "vault"}}
			drv.Spec.ServiceAccountTokenInSecrets = ptr(inSecrets)
			f := newCSIFixture(t, true, pvc, pv, drv, secret)
			tr := &tokenReactor{clock: testclock.NewFakeClock(time.Now())}
			f.client.PrependReactor("create", "serviceaccounts", tr.react)
			if _, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim")); err != nil {
				t.Fatal(err)
			}
			pub := f.driver.Last("NodePublishVolume").(*csipb.NodePublishVolumeRequest)
			_, inCtx := pub.GetVolumeContext()[ctxTokens]
			_, inSec := pub.GetSecrets()[ctxTokens]
			if inCtx == inSecrets || inSec != inSecrets || pub.GetSecrets()["user"] != "u" {
				t.Fatalf("tokens in the volume context: %v, in the secrets: %v (secrets %v); want them in the secrets only: %v",
					inCtx, inSec, slices.Sorted(maps.Keys(pub.GetSecrets())), inSecrets)
			}
		})
	}
}

// TestCSIVolumeMountGroup: a driver with VOLUME_MOUNT_GROUP gets the pod's
// fsGroup as volume_mount_group at stage and publish (and the node then
// changes no ownership itself); without the capability no group is sent.
func TestCSIVolumeMountGroup(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprintf("capability=%v", group), func(t *testing.T) {
			ctx := context.Background()
			pvc, pv := boundClaim("claim", "pv-1")
			f := newCSIFixture(t, false, pvc, pv, csiDriverObject(false, false))
			f.driver.Group = group // before registration, which reads the capabilities
			if err := f.reg.Register(ctx, testDriver, f.sock, []string{"1.0.0"}); err != nil {
				t.Fatal(err)
			}
			pod := claimPod("uid-a", "claim")
			pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr(int64(2000))}
			if _, err := f.mgr.MountPod(ctx, pod); err != nil {
				t.Fatal(err)
			}
			want := ""
			if group {
				want = "2000"
			}
			stage := f.driver.Last("NodeStageVolume").(*csipb.NodeStageVolumeRequest)
			pub := f.driver.Last("NodePublishVolume").(*csipb.NodePublishVolumeRequest)
			if got := stage.GetVolumeCapability().GetMount().GetVolumeMountGroup(); got != want {
				t.Errorf("NodeStageVolume volume_mount_group = %q, want %q", got, want)
			}
			if got := pub.GetVolumeCapability().GetMount().GetVolumeMountGroup(); got != want {
				t.Errorf("NodePublishVolume volume_mount_group = %q, want %q", got, want)
			}
		})
	}
}

// TestCSIStageAndUnstageErrors: the kubelet's NodeStage error semantics.
// A pod deleted after a final NodeStageVolume error is torn down without
// NodeUnstageVolume (the volume surely is not staged); after a transient
// one it is unstaged (it may be). After a failed NodeUnstageVolume, the
// next pod of the volume stages it again.
func TestCSIStageAndUnstageErrors(t *testing.T) {
	tests := []struct {
		name      string
		stageErr  error
		wantCalls []string
	}{
		{"final", status.Error(codes.InvalidArgument, "bad"),
			[]string{"NodeStageVolume handle-pv-1", "NodeUnpublishVolume handle-pv-1"}},
		{"transient", status.Error(codes.DeadlineExceeded, "slow"),
			[]string{"NodeStageVolume handle-pv-1", "NodeUnpublishVolume handle-pv-1", "NodeUnstageVolume handle-pv-1"}},
	}
	for _, tt := range tests {
		t.Run("stage "+tt.name, func(t *testing.T) {
			ctx := context.Background()
			pvc, pv := boundClaim("claim", "pv-1")
			f := newCSIFixture(t, true, pvc, pv, csiDriverObject(false, false))
			f.driver.StageErr = tt.stageErr
			if _, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim")); err == nil {
				t.Fatal("MountPod succeeded though NodeStageVolume failed")
			}
			if err := f.mgr.UnmountPod(ctx, "uid-a"); err != nil {
				t.Fatal(err)
			}
			if got := f.driver.Calls(); !slices.Equal(got, tt.wantCalls) {
				t.Fatalf("calls = %v, want %v", got, tt.wantCalls)
			}
		})
	}
	for _, code := range []codes.Code{codes.InvalidArgument, codes.DeadlineExceeded} {
		t.Run("unstage "+code.String(), func(t *testing.T) {
			ctx := context.Background()
			pvc, pv := boundClaim("claim", "pv-1")
			f := newCSIFixture(t, true, pvc, pv, csiDriverObject(false, false))
			if _, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim")); err != nil {
				t.Fatal(err)
			}
			f.driver.UnstageErr = status.Error(code, "injected")
			if err := f.mgr.UnmountPod(ctx, "uid-a"); err == nil {
				t.Fatal("UnmountPod succeeded though NodeUnstageVolume failed")
			}
			f.driver.UnstageErr = nil
			if _, err := f.mgr.MountPod(ctx, claimPod("uid-b", "claim")); err != nil {
				t.Fatal(err)
			}
			want := []string{"NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1", "NodeUnpublishVolume handle-pv-1",
				"NodeUnstageVolume handle-pv-1", "NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1"}
			if got := f.driver.Calls(); !slices.Equal(got, want) {
				t.Fatalf("calls = %v, want %v", got, want)
			}
		})
	}
}

// TestCSIAttachmentAwaitedInThePass: an attachment that the attacher
// completes while a pass waits lets that same pass stage and publish, with
// no failure to report.
func TestCSIAttachmentAwaitedInThePass(t *testing.T) {
	ctx := context.Background()
	pvc, pv := boundClaim("claim", "pv-1")
	f := newCSIFixture(t, true, pvc, pv) // attachRequired by default
	f.mgr.pluginByName(csiPluginName).(*csiPlugin).attachWait = 20 * time.Second
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: attachmentName("handle-pv-1", testDriver, "node-a")}}
	if _, err := f.client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(700 * time.Millisecond)
		va.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"dev": "/dev/y"}}
		_, _ = f.client.StorageV1().VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{})
	}()
	start := time.Now()
	if _, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim")); err != nil {
		t.Fatalf("the pass failed instead of waiting for the attachment: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the pass took %v", took)
	}
	if pub := f.driver.Last("NodePublishVolume").(*csipb.NodePublishVolumeRequest); pub.GetPublishContext()["dev"] != "/dev/y" {
		t.Fatalf("publish context = %v", pub.GetPublishContext())
	}

	// An attachment that failed ends the wait at once, with its error.
	pvc2, pv2 := boundClaim("other", "pv-2")
	g := newCSIFixture(t, true, pvc2, pv2)
	g.mgr.pluginByName(csiPluginName).(*csiPlugin).attachWait = 20 * time.Second
	failed := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: attachmentName("handle-pv-2", testDriver, "node-a")},
		Status: storagev1.VolumeAttachmentStatus{AttachError: &storagev1.VolumeError{Message: "no such disk"}}}
	if _, err := g.client.StorageV1().VolumeAttachments().Create(ctx, failed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := g.mgr.MountPod(ctx, claimPod("uid-b", "other")); err == nil || !strings.Contains(err.Error(), "no such disk") || time.Since(start) > 5*time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
}

// The Node authorizer lets the node read a claim and its volume once its
// own watch has the pod (and the claim bound): a refusal of a pod just
// bound is asked again rather than reported as a failed mount.
func TestCSIClaimForbiddenWhileAuthorizerCatchesUp(t *testing.T) {
	saved := forbiddenRetries
	forbiddenRetries = []time.Duration{time.Millisecond, time.Millisecond}
	t.Cleanup(func() { forbiddenRetries = saved })
	pvc, pv := boundClaim("claim", "pv-1")
	f := newCSIFixture(t, true, pvc, pv, csiDriverObject(false, false))
	refusals := map[string]int{"persistentvolumeclaims": 2, "persistentvolumes": 1}
	gets := map[string]int{}
	f.client.PrependReactor("get", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		res := a.GetResource().Resource
		gets[res]++
		if refusals[res] > 0 {
			refusals[res]--
			return true, nil, apierrors.NewForbidden(v1.Resource(res), "x", errors.New("no relationship found between node 'node-a' and this object"))
		}
		return false, nil, nil
	})
	if _, err := f.mgr.MountPod(context.Background(), claimPod("uid-a", "claim")); err != nil {
		t.Fatalf("mount after refusals: %v", err)
	}
	if gets["persistentvolumeclaims"] != 3 || gets["persistentvolumes"] != 2 {
		t.Errorf("gets %v, want 3 of the claim and 2 of the volume", gets)
	}

	// Refused for good: the last refusal is the error.
	refusals["persistentvolumeclaims"] = 10
	_, err := f.mgr.MountPod(context.Background(), claimPod("uid-b", "claim"))
	if !apierrors.IsForbidden(err) {
		t.Errorf("refused for good: %v, want Forbidden", err)
	}
}

// The volumes in use are read from the disk again only when this run's setup or teardown
// may have changed a record since the last scan, or the scan is a minute old: the node's
// status asks every 10 s, and a scan looks into every pod's directory.
func TestVolumesInUseScannedAgainOnlyAfterAChange(t *testing.T) {
	f := newCSIFixture(t, true)
	p := f.mgr.pluginByName(csiPluginName).(*csiPlugin)
	record := func(uid, handle string) {
		t.Helper()
		dir := filepath.Join(f.root, "pods", uid, "volumes", "kubernetes.io~csi", "pv-"+handle)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := writeVolData(dir, volData{VolumeHandle: handle, DriverName: testDriver, AttachmentID: "csi-" + handle}); err != nil {
			t.Fatal(err)
		}
	}
	name := func(handle string) v1.UniqueVolumeName { return uniqueVolumeName(testDriver, handle) }

	record("uid-a", "h1")
	if got := p.inUse(); !slices.Equal(got, []v1.UniqueVolumeName{name("h1")}) {
		t.Fatalf("in use = %v, want h1", got)
	}
	record("uid-b", "h2") // behind the plugin's back: the last scan still answers
	if got := p.inUse(); !slices.Equal(got, []v1.UniqueVolumeName{name("h1")}) {
		t.Fatalf("in use with nothing changed by the plugin = %v, want the last scan's h1", got)
	}
	p.inUseChanged()
	if got := p.inUse(); !slices.Equal(got, []v1.UniqueVolumeName{name("h1"), name("h2")}) {
		t.Fatalf("in use after a change = %v, want h1 and h2", got)
	}
	if err := os.RemoveAll(filepath.Join(f.root, "pods", "uid-a")); err != nil {
		t.Fatal(err)
	}
	p.inUseLast.at = p.inUseLast.at.Add(-inUseRescan)
	if got := p.inUse(); !slices.Equal(got, []v1.UniqueVolumeName{name("h2")}) {
		t.Fatalf("in use once the last scan is a minute old = %v, want h2", got)
	}
	got := p.inUse()
	got[0] = "changed by the caller"
	if again := p.inUse(); !slices.Equal(again, []v1.UniqueVolumeName{name("h2")}) {
		t.Fatalf("in use = %v after a caller changed its copy", again)
	}
}
