package volume

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeNode is this node's Node as a watch of it holds it: none until set.
type fakeNode struct {
	mu    sync.Mutex
	node  *v1.Node
	reads int
}

func (f *fakeNode) get() (*v1.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.node == nil {
		return nil, apierrors.NewNotFound(v1.Resource("node"), "node-a")
	}
	return f.node.DeepCopy(), nil
}

// set gives the Node a status listing the volumes in use and attached.
func (f *fakeNode) set(inUse, attached []v1.UniqueVolumeName) {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}}}
	n.Status.VolumesInUse = inUse
	for _, name := range attached {
		n.Status.VolumesAttached = append(n.Status.VolumesAttached, v1.AttachedVolume{Name: name})
	}
	f.mu.Lock()
	f.node = n
	f.mu.Unlock()
}

func (f *fakeNode) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// withNode makes the fixture's attach/detach controller manage the node's
// attachments: the CSI plugin reads the Node from node.
func (f *csiFixture) withNode(node *fakeNode) {
	f.mgr.pluginByName(csiPluginName).(*csiPlugin).node = node.get
}

func attachedVA(t *testing.T, f *csiFixture, handle string) {
	t.Helper()
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: attachmentName(handle, testDriver, "node-a")},
		Status: storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"dev": "/dev/x"}}}
	if _, err := f.client.StorageV1().VolumeAttachments().Create(context.Background(), va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func vaReads(f *csiFixture) int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "volumeattachments" {
			n++
		}
	}
	return n
}

// TestCSIAttachGatedByNodeStatus: with the attach/detach controller
// managing attachments, a volume whose attachment says attached is not
// staged until the Node's status lists it in use and attached; each pass
// fails meanwhile with the kubelet's words (the pod's FailedMount event),
// the attachment is not read before the Node lists the volume, and once
// listed the volume is staged and published with the attachment's
// metadata.
func TestCSIAttachGatedByNodeStatus(t *testing.T) {
	ctx := context.Background()
	pvc, pv := boundClaim("claim", "pv-1")
	f := newCSIFixture(t, true, pvc, pv) // no CSIDriver: attachRequired defaults to true
	node := &fakeNode{}
	f.withNode(node)
	attachedVA(t, f, "handle-pv-1")
	pod := claimPod("uid-a", "claim")
	name := uniqueVolumeName(testDriver, "handle-pv-1")

	steps := []struct {
		name    string
		set     func()
		wantErr string
	}{
		{"Node not in the cache yet", func() {},
			`VerifyControllerAttachedVolume failed fetching node from API server for volume "pv-1" : node "node-a" not found`},
		{"not reported in use yet", func() { node.set(nil, nil) },
			`Volume has not been added to the list of VolumesInUse in the node's volume status for volume "pv-1" `},
		{"in use, not attached", func() { node.set([]v1.UniqueVolumeName{name}, nil) },
			`Volume not attached according to node status for volume "pv-1" `},
		{"another volume attached", func() {
			node.set([]v1.UniqueVolumeName{name}, []v1.UniqueVolumeName{uniqueVolumeName(testDriver, "handle-pv-2")})
		}, `Volume not attached according to node status for volume "pv-1" `},
	}
	for _, s := range steps {
		s.set()
		_, err := f.mgr.MountPod(ctx, pod)
		var me *MountError
		if !errors.As(err, &me) || me.Error() != s.wantErr || err.Error() != s.wantErr {
			t.Fatalf("%s: err = %q, want %q", s.name, err, s.wantErr)
		}
		if !errors.Is(err, errAttachPending) {
			t.Errorf("%s: %v is not a pending attachment", s.name, err)
		}
		if calls := f.driver.Calls(); len(calls) != 0 {
			t.Fatalf("%s: driver called %v", s.name, calls)
		}
		if n := vaReads(f); n != 0 {
			t.Fatalf("%s: the VolumeAttachment was read %d times before the Node listed the volume", s.name, n)
		}
		// Recorded in use while it waits, for the Node's volumesInUse.
		if got := f.mgr.VolumesInUse(); !slices.Equal(got, []v1.UniqueVolumeName{name}) {
			t.Fatalf("%s: volumes in use = %v", s.name, got)
		}
	}

	node.set([]v1.UniqueVolumeName{name}, []v1.UniqueVolumeName{name})
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := f.driver.Calls(); !slices.Equal(got, []string{"NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1"}) {
		t.Fatalf("calls = %v", got)
	}
	if stage := f.driver.Last("NodeStageVolume").(*csipb.NodeStageVolumeRequest); stage.GetPublishContext()["dev"] != "/dev/x" {
		t.Fatalf("publish context = %v, want the attachment's metadata", stage.GetPublishContext())
	}
}

// TestCSIAttachListedWhileThePassWaits: a volume the controller lists while
// the pass waits is staged by that same pass, with no failure.
func TestCSIAttachListedWhileThePassWaits(t *testing.T) {
	ctx := context.Background()
	pvc, pv := boundClaim("claim", "pv-1")
	f := newCSIFixture(t, true, pvc, pv)
	f.mgr.pluginByName(csiPluginName).(*csiPlugin).attachWait = 20 * time.Second
	node := &fakeNode{}
	f.withNode(node)
	attachedVA(t, f, "handle-pv-1")
	name := uniqueVolumeName(testDriver, "handle-pv-1")
	node.set([]v1.UniqueVolumeName{name}, nil)
	go func() {
		time.Sleep(700 * time.Millisecond)
		node.set([]v1.UniqueVolumeName{name}, []v1.UniqueVolumeName{name})
	}()
	start := time.Now()
	if _, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim")); err != nil {
		t.Fatalf("the pass failed instead of waiting for the Node: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the pass took %v", took)
	}
	if node.readCount() < 2 {
		t.Fatalf("the Node was read %d times", node.readCount())
	}
}

// TestCSIAttachNotRequiredNotGated: the volumes of a driver whose CSIDriver
// says attachRequired=false never appear in volumesAttached; they are
// published without a look at the Node or an attachment.
func TestCSIAttachNotRequiredNotGated(t *testing.T) {
	ctx := context.Background()
	pvc, pv := boundClaim("claim", "pv-1")
	f := newCSIFixture(t, true, pvc, pv, csiDriverObject(false, false))
	node := &fakeNode{}
	node.set(nil, nil)
	f.withNode(node)
	if _, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim")); err != nil {
		t.Fatal(err)
	}
	if node.readCount() != 0 || vaReads(f) != 0 {
		t.Fatalf("the Node was read %d times, the attachment %d times", node.readCount(), vaReads(f))
	}
	if got := f.driver.Calls(); !slices.Equal(got, []string{"NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1"}) {
		t.Fatalf("calls = %v", got)
	}
}

// TestCSIAttachNoLongerRequiredEndsTheWait: a volume waiting for its
// attachment is staged and published, with no publish context, once its
// driver's CSIDriver is recreated with attachRequired=false (the
// controller then detaches it and never lists it attached).
func TestCSIAttachNoLongerRequiredEndsTheWait(t *testing.T) {
	ctx := context.Background()
	pvc, pv := boundClaim("claim", "pv-1")
	f := newCSIFixture(t, true, pvc, pv) // no CSIDriver: attachRequired defaults to true
	f.mgr.pluginByName(csiPluginName).(*csiPlugin).attachWait = 20 * time.Second
	node := &fakeNode{}
	f.withNode(node)
	name := uniqueVolumeName(testDriver, "handle-pv-1")
	node.set([]v1.UniqueVolumeName{name}, nil)
	go func() {
		time.Sleep(700 * time.Millisecond)
		if _, err := f.client.StorageV1().CSIDrivers().Create(ctx, csiDriverObject(false, false), metav1.CreateOptions{}); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	if _, err := f.mgr.MountPod(ctx, claimPod("uid-a", "claim")); err != nil {
		t.Fatalf("the pass failed instead of publishing once attaching was no longer required: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the pass took %v", took)
	}
	if node.readCount() < 2 {
		t.Fatalf("the Node was read %d times: the pass never waited", node.readCount())
	}
	if got := f.driver.Calls(); !slices.Equal(got, []string{"NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1"}) {
		t.Fatalf("calls = %v", got)
	}
	if stage := f.driver.Last("NodeStageVolume").(*csipb.NodeStageVolumeRequest); len(stage.GetPublishContext()) != 0 {
		t.Fatalf("publish context = %v, want none", stage.GetPublishContext())
	}
}

// TestCSIAttachWaitHoldsNoLock: while one pod's volume waits for the
// Node to list it attached, another pod of the same volume is torn down
// (without unstaging it: the waiting pod has it recorded) and a pod of
// another volume is published; the waiting pass then publishes without
// staging again.
func TestCSIAttachWaitHoldsNoLock(t *testing.T) {
	ctx := context.Background()
	pvc1, pv1 := boundClaim("one", "pv-1")
	pvc2, pv2 := boundClaim("two", "pv-2")
	f := newCSIFixture(t, true, pvc1, pv1, pvc2, pv2)
	p := f.mgr.pluginByName(csiPluginName).(*csiPlugin)
	node := &fakeNode{}
	f.withNode(node)
	attachedVA(t, f, "handle-pv-1")
	attachedVA(t, f, "handle-pv-2")
	one, two := uniqueVolumeName(testDriver, "handle-pv-1"), uniqueVolumeName(testDriver, "handle-pv-2")
	node.set([]v1.UniqueVolumeName{one}, []v1.UniqueVolumeName{one})
	if _, err := f.mgr.MountPod(ctx, claimPod("uid-a", "one")); err != nil {
		t.Fatal(err)
	}

	// The controller withdraws pv-1 (say, to detach it from a node it
	// believes gone); pod b of pv-1 waits.
	node.set([]v1.UniqueVolumeName{one, two}, []v1.UniqueVolumeName{two})
	p.attachWait = 30 * time.Second
	waited := make(chan error, 1)
	go func() {
		_, err := f.mgr.MountPod(ctx, claimPod("uid-b", "one"))
		waited <- err
	}()
	for node.readCount() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	within := func(what string, fn func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s blocked by a volume waiting for its attachment", what)
		}
	}
	within("the teardown of pod a", func() error { return f.mgr.UnmountPod(ctx, "uid-a") })
	within("the publish of pod c", func() error {
		_, err := f.mgr.MountPod(ctx, claimPod("uid-c", "two"))
		return err
	})
	node.set([]v1.UniqueVolumeName{one, two}, []v1.UniqueVolumeName{one, two})
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting pass did not finish")
	}
	want := []string{"NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1", // pod a
		"NodeUnpublishVolume handle-pv-1",                              // pod a's teardown, no unstage
		"NodeStageVolume handle-pv-2", "NodePublishVolume handle-pv-2", // pod c
		"NodePublishVolume handle-pv-1"} // pod b, still staged
	if got := f.driver.Calls(); !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
}
