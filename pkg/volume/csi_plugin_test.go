package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
	mgr    *Manager
	driver *csitest.Driver
	fm     *fakeMounter
	client *fake.Clientset
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
	mgr, err := NewManager(Config{RootDir: t.TempDir(), Client: client, NodeName: "node-a", HugePagesDir: t.TempDir(),
		CSIDrivers: reg, mounter: fm})
	if err != nil {
		t.Fatal(err)
	}
	return &csiFixture{mgr: mgr, driver: drv, fm: fm, client: client, root: mgr.layout.Root()}
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
	if mps, _ := f.fm.mountPoints(); len(mps) != 0 {
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
