package resizer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// The Controller in process: the real controller against a fake apiserver (newFakeClient)
// and a fake CSI driver served over gRPC on a unix socket, as the CSI Mock specs run it
// against the mock driver. Each test plays the user (changing the request) and, where it
// matters, the node (finishing a node expansion).

// world is a running Controller and what it talks to.
type world struct {
	t      *testing.T
	client *fake.Clientset
	driver *fakeDriver
}

// startResizer runs a Controller for d (named testDriver) over objs until the test ends;
// cfg, when set, changes its config. Retries are quick (10ms doubling up to a second).
func startResizer(t *testing.T, d *fakeDriver, cfg func(*Config), objs ...runtime.Object) *world {
	t.Helper()
	d.name = testDriver
	conn := serveDriver(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	driver, err := Discover(ctx, conn, 5*time.Second)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &world{t: t, client: newFakeClient(objs...), driver: d}
	c := Config{
		Client:             w.client,
		Driver:             driver,
		Expander:           csi.NewControllerClient(conn),
		Workers:            2,
		RetryIntervalStart: 10 * time.Millisecond,
		RetryIntervalMax:   time.Second,
		HandleVolumeInUse:  true,
	}
	if cfg != nil {
		cfg(&c)
	}
	ctrl, err := New(c)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
		// The apiserver's admission checks a StorageClass's allowVolumeExpansion; the
		// resizer's RBAC has no access to StorageClasses, and it never asks.
		for _, a := range w.client.Actions() {
			if a.GetResource().Resource == "storageclasses" {
				t.Errorf("the resizer read StorageClasses: %v", a)
			}
		}
	})
	return w
}

// setRequest plays the user: the claim ns/name now asks for size.
func (w *world) setRequest(name, size string) {
	w.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc, err := w.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pvc.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(size)
		_, err = w.client.CoreV1().PersistentVolumeClaims("ns").Update(context.Background(), pvc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		w.t.Fatalf("set the request of %s: %v", name, err)
	}
}

// waitClaim waits until the claim ns/name satisfies ok and returns it.
func (w *world) waitClaim(name, what string, ok func(*v1.PersistentVolumeClaim) bool) *v1.PersistentVolumeClaim {
	w.t.Helper()
	var pvc *v1.PersistentVolumeClaim
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		pvc, err = w.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && ok(pvc) {
			return pvc
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Fatalf("claim %s: not %s; last seen: annotations %v, status %+v", name, what, pvc.Annotations, pvc.Status)
	return nil
}

func (w *world) pv(name string) *v1.PersistentVolume {
	w.t.Helper()
	pv, err := w.client.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return pv
}

// waitPV waits until the PV name satisfies ok.
func (w *world) waitPV(name, what string, ok func(*v1.PersistentVolume) bool) {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ok(w.pv(name)) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Fatalf("PV %s: not %s; last seen: %+v", name, what, w.pv(name))
}

// waitEvent waits for an event of reason on a claim and returns its message.
func (w *world) waitEvent(reason string) string {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		events, err := w.client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		if err == nil {
			for _, e := range events.Items {
				if e.Reason == reason && e.InvolvedObject.Kind == "PersistentVolumeClaim" {
					return e.Message
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Fatalf("no %s event", reason)
	return ""
}

// expandsStayAt checks that the driver was asked to expand n times, and is not asked again
// for a while.
func (w *world) expandsStayAt(n int, why string) {
	w.t.Helper()
	time.Sleep(300 * time.Millisecond)
	if got := len(w.driver.expandRequests()); got != n {
		w.t.Errorf("%s: %d ControllerExpandVolume calls, want %d", why, got, n)
	}
}

func resizeStatus(pvc *v1.PersistentVolumeClaim) v1.ClaimResourceStatus {
	return pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
}

func allocatedIs(pvc *v1.PersistentVolumeClaim, size string) bool {
	got, ok := pvc.Status.AllocatedResources[v1.ResourceStorage]
	return ok && got.Cmp(resource.MustParse(size)) == 0
}

func sizeIs(list v1.ResourceList, size string) bool {
	got, ok := list[v1.ResourceStorage]
	return ok && got.Cmp(resource.MustParse(size)) == 0
}

// nodeFinishes plays the node after it grew the file system: the claim's new capacity,
// no resize status or condition.
func (w *world) nodeFinishes(name, size string) {
	w.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc, err := w.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pvc.Status.Capacity[v1.ResourceStorage] = resource.MustParse(size)
		pvc.Status.AllocatedResourceStatuses = nil
		pvc.Status.Conditions = setResizeConditions(pvc.Status.Conditions, false)
		_, err = w.client.CoreV1().PersistentVolumeClaims("ns").UpdateStatus(context.Background(), pvc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

func TestExpandInControllerThenOnNode(t *testing.T) {
	pvc, pv := boundClaim("1Gi")
	d := &fakeDriver{controllerExpansion: true, nodeExpansion: true, nodeExpansionRequired: true}
	w := startResizer(t, d, func(c *Config) { c.AnnotateFsResize = true }, pvc, pv)

	w.setRequest("data", "6Gi")
	got := w.waitClaim("data", "pending on the node", func(c *v1.PersistentVolumeClaim) bool {
		return resizeStatus(c) == v1.PersistentVolumeClaimNodeResizePending
	})
	if !allocatedIs(got, "6Gi") {
		t.Errorf("allocatedResources = %v, want 6Gi", got.Status.AllocatedResources)
	}
	if !hasCondition(got, v1.PersistentVolumeClaimFileSystemResizePending) {
		t.Errorf("conditions = %v, want FileSystemResizePending", conditionTypes(got.Status.Conditions))
	}
	if !sizeIs(got.Status.Capacity, "1Gi") {
		t.Errorf("capacity = %v: the node has not grown the file system yet", got.Status.Capacity)
	}
	grown := w.pv("pv-data")
	if !sizeIs(grown.Spec.Capacity, "6Gi") {
		t.Errorf("PV capacity = %v, want 6Gi", grown.Spec.Capacity)
	}
	if a := grown.Annotations[annPreResizeCapacity]; a != "1Gi" {
		t.Errorf("pre-resize annotation = %q, want 1Gi", a)
	}
	reqs := d.expandRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d ControllerExpandVolume calls, want 1", len(reqs))
	}
	r := reqs[0]
	if r.GetVolumeId() != "vol-1" || r.GetCapacityRange().GetRequiredBytes() != 6<<30 || r.GetSecrets() != nil {
		t.Errorf("request = %v", r)
	}
	if r.GetVolumeCapability().GetMount().GetFsType() != "ext4" || r.GetVolumeCapability().GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Errorf("volume capability = %v", r.GetVolumeCapability())
	}
	if msg := w.waitEvent(reasonResizing); msg != "External resizer is resizing volume pv-data" {
		t.Errorf("Resizing event: %q", msg)
	}
	w.waitEvent(reasonFileSystemResizeRequired)

	// The node finishes; the annotation has served.
	w.nodeFinishes("data", "6Gi")
	w.waitPV("pv-data", "without the pre-resize annotation", func(pv *v1.PersistentVolume) bool {
		_, ok := pv.Annotations[annPreResizeCapacity]
		return !ok
	})
	w.expandsStayAt(1, "after the node finished")
}

func TestExpandInControllerOnlyWithSecrets(t *testing.T) {
	pvc, pv := boundClaim("1Gi")
	pv.Spec.CSI.ControllerExpandSecretRef = &v1.SecretReference{Namespace: "secrets", Name: "expand"}
	pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}
	secret := &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "secrets", Name: "expand"},
		Data:       map[string][]byte{"username": []byte("admin"), "password": []byte("t0p-Secret")},
	}
	d := &fakeDriver{controllerExpansion: true, singleNodeMultiWriter: true}
	w := startResizer(t, d, func(c *Config) { c.AnnotateFsResize = true }, pvc, pv, secret)

	w.setRequest("data", "6Gi")
	got := w.waitClaim("data", "resized", func(c *v1.PersistentVolumeClaim) bool { return sizeIs(c.Status.Capacity, "6Gi") })
	if got.Status.AllocatedResourceStatuses != nil {
		t.Errorf("resize status = %v, want none", got.Status.AllocatedResourceStatuses)
	}
	if len(got.Status.Conditions) != 0 {
		t.Errorf("conditions = %v, want none", conditionTypes(got.Status.Conditions))
	}
	if !allocatedIs(got, "6Gi") {
		t.Errorf("allocatedResources = %v, want 6Gi", got.Status.AllocatedResources)
	}
	if got.Annotations[annNodeExpansionNotRequired] != "true" {
		t.Errorf("annotations = %v, want %s", got.Annotations, annNodeExpansionNotRequired)
	}
	grown := w.pv("pv-data")
	if !sizeIs(grown.Spec.Capacity, "6Gi") {
		t.Errorf("PV capacity = %v, want 6Gi", grown.Spec.Capacity)
	}
	if _, ok := grown.Annotations[annPreResizeCapacity]; ok {
		t.Error("a pre-resize annotation with nothing left for the node")
	}
	reqs := d.expandRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d ControllerExpandVolume calls, want 1", len(reqs))
	}
	if want := map[string]string{"username": "admin", "password": "t0p-Secret"}; !maps.Equal(reqs[0].GetSecrets(), want) {
		t.Errorf("secrets = %v, want %v", reqs[0].GetSecrets(), want)
	}
	if m := reqs[0].GetVolumeCapability().GetAccessMode().GetMode(); m != csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		t.Errorf("access mode = %v", m)
	}
	w.waitEvent(reasonResizeSucceeded)
	w.expandsStayAt(1, "after the resize")
}

func TestExpandNodeOnly(t *testing.T) {
	pvc, pv := boundClaim("1Gi")
	d := &fakeDriver{nodeExpansion: true}
	w := startResizer(t, d, nil, pvc, pv)

	w.setRequest("data", "6Gi")
	got := w.waitClaim("data", "pending on the node", func(c *v1.PersistentVolumeClaim) bool {
		return resizeStatus(c) == v1.PersistentVolumeClaimNodeResizePending
	})
	if !allocatedIs(got, "6Gi") {
		t.Errorf("allocatedResources = %v, want 6Gi", got.Status.AllocatedResources)
	}
	if !sizeIs(w.pv("pv-data").Spec.Capacity, "6Gi") {
		t.Errorf("PV capacity = %v, want 6Gi", w.pv("pv-data").Spec.Capacity)
	}
	w.waitEvent(reasonFileSystemResizeRequired)
	w.expandsStayAt(0, "a node-only driver")
}

// TestRecoverFromInfeasible is the CSI Mock spec "should allow recovery if controller
// expansion fails with infeasible error": the driver refuses more than 10Gi as an invalid
// argument; the user lowers the request from 11Gi to 4Gi.
func TestRecoverFromInfeasible(t *testing.T) {
	pvc, pv := boundClaim("1Gi")
	d := &fakeDriver{controllerExpansion: true, nodeExpansion: true, nodeExpansionRequired: true}
	d.setExpand(refuseOver(10<<30, codes.InvalidArgument))
	// An infeasible size is tried again only after RetryIntervalMax.
	w := startResizer(t, d, func(c *Config) { c.RetryIntervalMax = time.Minute }, pvc, pv)

	w.setRequest("data", "11Gi")
	got := w.waitClaim("data", "infeasible", func(c *v1.PersistentVolumeClaim) bool {
		return resizeStatus(c) == v1.PersistentVolumeClaimControllerResizeInfeasible
	})
	if !allocatedIs(got, "11Gi") {
		t.Errorf("allocatedResources = %v, want 11Gi", got.Status.AllocatedResources)
	}
	if !hasCondition(got, v1.PersistentVolumeClaimControllerResizeError) {
		t.Errorf("conditions = %v, want ControllerResizeError", conditionTypes(got.Status.Conditions))
	}
	w.waitEvent(reasonResizeFailed)
	// The size is tried once more at once (the first pass to see the claim infeasible),
	// perhaps twice if the informer is slow to show it, then not for RetryIntervalMax.
	time.Sleep(200 * time.Millisecond)
	n := len(d.expandRequests())
	if n < 1 || n > 3 {
		t.Errorf("%d ControllerExpandVolume calls for the infeasible size, want 1 to 3", n)
	}
	w.expandsStayAt(n, "waiting out the infeasible size")

	w.setRequest("data", "4Gi")
	got = w.waitClaim("data", "pending on the node at 4Gi", func(c *v1.PersistentVolumeClaim) bool {
		return resizeStatus(c) == v1.PersistentVolumeClaimNodeResizePending && allocatedIs(c, "4Gi")
	})
	if hasCondition(got, v1.PersistentVolumeClaimControllerResizeError) {
		t.Error("the ControllerResizeError condition stayed after the recovery")
	}
	if !sizeIs(w.pv("pv-data").Spec.Capacity, "4Gi") {
		t.Errorf("PV capacity = %v, want 4Gi", w.pv("pv-data").Spec.Capacity)
	}
	reqs := d.expandRequests()
	if last := reqs[len(reqs)-1].GetCapacityRange().GetRequiredBytes(); last != 4<<30 {
		t.Errorf("last ControllerExpandVolume asked for %d bytes, want 4Gi", last)
	}
}

// TestRecoverFromFinalError is "should allow recovery if controller expansion fails with
// final error": a final error that is not infeasible leaves the status
// ControllerResizeInProgress with a ControllerResizeError condition, and still lets the
// user lower the request.
func TestRecoverFromFinalError(t *testing.T) {
	pvc, pv := boundClaim("1Gi")
	d := &fakeDriver{controllerExpansion: true, nodeExpansion: true, nodeExpansionRequired: true}
	d.setExpand(refuseOver(10<<30, codes.PermissionDenied))
	w := startResizer(t, d, nil, pvc, pv)

	w.setRequest("data", "11Gi")
	got := w.waitClaim("data", "failed", func(c *v1.PersistentVolumeClaim) bool {
		return hasCondition(c, v1.PersistentVolumeClaimControllerResizeError)
	})
	if s := resizeStatus(got); s != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Errorf("resize status = %q, want ControllerResizeInProgress", s)
	}
	if !allocatedIs(got, "11Gi") {
		t.Errorf("allocatedResources = %v, want 11Gi", got.Status.AllocatedResources)
	}
	msg := w.waitEvent(reasonResizeFailed)
	if want := fmt.Sprintf("resize volume %q by resizer %q failed: ", "pv-data", testDriver); len(msg) < len(want) || msg[:len(want)] != want {
		t.Errorf("VolumeResizeFailed event: %q", msg)
	}

	w.setRequest("data", "4Gi")
	got = w.waitClaim("data", "pending on the node at 4Gi", func(c *v1.PersistentVolumeClaim) bool {
		return resizeStatus(c) == v1.PersistentVolumeClaimNodeResizePending && allocatedIs(c, "4Gi")
	})
	if hasCondition(got, v1.PersistentVolumeClaimControllerResizeError) {
		t.Error("the ControllerResizeError condition stayed after the recovery")
	}
}

// TestUnknownOutcomeKeepsTheSize: after a timeout the driver may still be growing the
// volume, so a lowered request waits for the size already asked for.
func TestUnknownOutcomeKeepsTheSize(t *testing.T) {
	pvc, pv := boundClaim("1Gi")
	d := &fakeDriver{controllerExpansion: true}
	d.setExpand(refuseOver(10<<30, codes.DeadlineExceeded))
	w := startResizer(t, d, nil, pvc, pv)

	w.setRequest("data", "11Gi")
	w.waitClaim("data", "resizing at 11Gi", func(c *v1.PersistentVolumeClaim) bool {
		return resizeStatus(c) == v1.PersistentVolumeClaimControllerResizeInProgress && allocatedIs(c, "11Gi")
	})
	w.waitEvent(reasonResizeFailed)
	w.setRequest("data", "4Gi")
	time.Sleep(300 * time.Millisecond)
	for _, r := range d.expandRequests() {
		if r.GetCapacityRange().GetRequiredBytes() != 11<<30 {
			t.Fatalf("ControllerExpandVolume asked for %d bytes while an 11Gi expansion was in doubt", r.GetCapacityRange().GetRequiredBytes())
		}
	}
	// The driver finishes the 11Gi expansion after all.
	d.setExpand(nil)
	got := w.waitClaim("data", "resized to 11Gi", func(c *v1.PersistentVolumeClaim) bool { return sizeIs(c.Status.Capacity, "11Gi") })
	if got.Status.AllocatedResourceStatuses != nil {
		t.Errorf("resize status = %v, want none", got.Status.AllocatedResourceStatuses)
	}
}

// TestOtherDriverIgnored: a claim bound to another driver's PV is left alone.
func TestOtherDriverIgnored(t *testing.T) {
	pvc, pv := boundClaim("1Gi")
	other, otherPV := boundClaim("1Gi")
	other.Name, other.UID, other.Spec.VolumeName = "other", "uid-other", "pv-other"
	otherPV.Name, otherPV.Spec.ClaimRef.Name, otherPV.Spec.ClaimRef.UID = "pv-other", "other", "uid-other"
	otherPV.Spec.CSI.Driver = "other.csi.example.com"
	d := &fakeDriver{controllerExpansion: true}
	w := startResizer(t, d, nil, other, otherPV, pvc, pv)

	w.setRequest("other", "6Gi")
	w.setRequest("data", "6Gi")
	w.waitClaim("data", "resized", func(c *v1.PersistentVolumeClaim) bool { return sizeIs(c.Status.Capacity, "6Gi") })
	got := w.waitClaim("other", "as it was", func(*v1.PersistentVolumeClaim) bool { return true })
	if got.Status.AllocatedResources != nil || got.Status.Conditions != nil || !sizeIs(got.Status.Capacity, "1Gi") {
		t.Errorf("another driver's claim was touched: %+v", got.Status)
	}
	if !sizeIs(w.pv("pv-other").Spec.Capacity, "1Gi") {
		t.Error("another driver's PV was touched")
	}
	w.expandsStayAt(1, "one claim of the driver")
}

// TestStorageClassNotConsulted: whether a claim's StorageClass allows expansion is the
// apiserver's to check (the PersistentVolumeClaimResize admission refuses a larger
// request otherwise); external-resizer does not read StorageClasses, and its RBAC, which
// the CSI Mock specs deploy, grants no access to them. A claim that got past admission is
// grown (startResizer checks that no StorageClass was read).
func TestStorageClassNotConsulted(t *testing.T) {
	pvc, pv := boundClaim("1Gi")
	pvc.Spec.StorageClassName = ptr.To("fixed")
	pv.Spec.StorageClassName = "fixed"
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fixed"}, Provisioner: testDriver, AllowVolumeExpansion: ptr.To(false)}
	d := &fakeDriver{controllerExpansion: true}
	w := startResizer(t, d, nil, sc, pvc, pv)
	w.setRequest("data", "6Gi")
	w.waitClaim("data", "resized", func(c *v1.PersistentVolumeClaim) bool { return sizeIs(c.Status.Capacity, "6Gi") })
}

// TestVolumeInUse: a driver that grows volumes only offline refuses while a pod uses the
// volume; the resizer then waits for the pod to go before it asks again.
func TestVolumeInUse(t *testing.T) {
	pvc, pv := boundClaim("1Gi")
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-app"},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning},
	}
	d := &fakeDriver{controllerExpansion: true}
	d.setExpand(func(*csi.ControllerExpandVolumeRequest) error {
		return status.Error(codes.FailedPrecondition, "volume is published")
	})
	w := startResizer(t, d, func(c *Config) { c.RetryIntervalMax = 100 * time.Millisecond }, pvc, pv, pod)

	w.setRequest("data", "6Gi")
	w.waitEventMessage(reasonResizeFailed, "Unable to expand ns/data because CSI driver "+testDriver+" only supports offline expansion and volume is currently in-use")
	w.expandsStayAt(1, "while the pod uses the volume")

	d.setExpand(nil)
	if err := w.client.CoreV1().Pods("ns").Delete(context.Background(), "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitClaim("data", "resized", func(c *v1.PersistentVolumeClaim) bool { return sizeIs(c.Status.Capacity, "6Gi") })
}

// waitEventMessage waits for an event of reason with message msg on a claim.
func (w *world) waitEventMessage(reason, msg string) {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		events, err := w.client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		if err == nil && slices.ContainsFunc(events.Items, func(e v1.Event) bool { return e.Reason == reason && e.Message == msg }) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Fatalf("no %s event %q", reason, msg)
}

// refuseOver is a ControllerExpandVolume answer that fails with code above limit bytes.
func refuseOver(limit int64, code codes.Code) func(*csi.ControllerExpandVolumeRequest) error {
	return func(req *csi.ControllerExpandVolumeRequest) error {
		if req.GetCapacityRange().GetRequiredBytes() > limit {
			return status.Error(code, "expansion refused")
		}
		return nil
	}
}
