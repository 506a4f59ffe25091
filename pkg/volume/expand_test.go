package volume

import (
	"context"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	testclock "k8s.io/utils/clock/testing"
)

// expandFixture is a published claim of 1Gi on a driver that can expand,
// with the expander on a fake clock.
func expandFixture(t *testing.T, expand bool) (*csiFixture, *testclock.FakeClock) {
	t.Helper()
	pvc, pv := boundClaim("claim", "pv-1")
	pvc.ResourceVersion = "1"
	pvc.Status.Capacity = v1.ResourceList{v1.ResourceStorage: mustQ("1Gi")}
	pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: mustQ("1Gi")}
	f := newCSIFixture(t, false, pvc, pv, csiDriverObject(false, false))
	f.driver.Expand = expand
	if err := f.reg.Register(context.Background(), testDriver, f.sock, []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	clk := testclock.NewFakeClock(time.Now())
	f.mgr.expand.clock = clk
	if _, err := f.mgr.MountPod(context.Background(), claimPod("uid-1", "claim")); err != nil {
		t.Fatal(err)
	}
	return f, clk
}

// grow plays the resizer: the PV raised to 2Gi, the claim marked for the node.
func grow(t *testing.T, f *csiFixture) {
	t.Helper()
	ctx := context.Background()
	pv, _ := f.client.CoreV1().PersistentVolumes().Get(ctx, "pv-1", metav1.GetOptions{})
	pv.Spec.Capacity[v1.ResourceStorage] = mustQ("2Gi")
	if _, err := f.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc, _ := f.client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "claim", metav1.GetOptions{})
	pvc.ResourceVersion = "2"
	pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: mustQ("2Gi")}
	pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
	if _, err := f.client.CoreV1().PersistentVolumeClaims("ns").UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func expandCalls(f *csiFixture) int {
	n := 0
	for _, c := range f.driver.Calls() {
		if strings.HasPrefix(c, "NodeExpandVolume") {
			n++
		}
	}
	return n
}

// TestOnlineExpansion: nothing is asked while the sizes agree; once the PV
// grew and the claim waits for the node, NodeExpandVolume gets the new
// size, the publish and staging paths, and the claim's capacity and status
// are written as the kubelet writes them, with its events.
func TestOnlineExpansion(t *testing.T) {
	f, clk := expandFixture(t, true)
	ctx := context.Background()
	rec := record.NewFakeRecorder(20)
	f.mgr.expand.rec = rec
	e := f.mgr.expand

	e.pass(ctx)
	e.wg.Wait()
	if n := expandCalls(f); n != 0 {
		t.Fatalf("NodeExpandVolume called %d times before any growth", n)
	}
	grow(t, f)
	// Not yet due: the claim is read again only after the period.
	e.pass(ctx)
	e.wg.Wait()
	if n := expandCalls(f); n != 0 {
		t.Fatalf("claim read before its period: %d calls", n)
	}
	clk.Step(DefaultClaimCheckPeriod)
	e.pass(ctx)
	e.wg.Wait()
	if n := expandCalls(f); n != 1 {
		t.Fatalf("NodeExpandVolume called %d times, want 1", n)
	}
	req := f.driver.Last("NodeExpandVolume").(*csipb.NodeExpandVolumeRequest)
	if req.GetCapacityRange().GetRequiredBytes() != 2<<30 || req.GetVolumeId() != "handle-pv-1" ||
		!strings.HasSuffix(req.GetVolumePath(), "/volumes/kubernetes.io~csi/pv-1/mount") ||
		!strings.HasSuffix(req.GetStagingTargetPath(), "/globalmount") || req.GetVolumeCapability().GetMount() == nil {
		t.Errorf("request = %v", req)
	}
	pvc, _ := f.client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "claim", metav1.GetOptions{})
	if got := pvc.Status.Capacity[v1.ResourceStorage]; got.Cmp(mustQ("2Gi")) != 0 || len(pvc.Status.AllocatedResourceStatuses) != 0 {
		t.Errorf("claim status = %+v", pvc.Status)
	}
	events := drain(rec)
	if len(events) != 2 || !strings.HasPrefix(events[0], `Normal FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv-1" node-a`) {
		t.Errorf("events = %q", events)
	}
	// Done: later looks ask nothing more.
	clk.Step(DefaultClaimCheckPeriod)
	e.pass(ctx)
	e.wg.Wait()
	if n := expandCalls(f); n != 1 {
		t.Errorf("NodeExpandVolume called again: %d", n)
	}
}

// TestOnlineExpansionFailureRetried: a failing driver gets the kubelet's
// VolumeResizeFailed event and NodeResizeError condition, and a retry
// after the back-off, which succeeds and clears the condition.
func TestOnlineExpansionFailureRetried(t *testing.T) {
	f, clk := expandFixture(t, true)
	f.driver.ExpandErrs = append(f.driver.ExpandErrs, status.Error(codes.Internal, "disk on fire"))
	ctx := context.Background()
	rec := record.NewFakeRecorder(20)
	f.mgr.expand.rec = rec
	e := f.mgr.expand
	e.pass(ctx) // the pass's own reads: sizes agree
	grow(t, f)
	clk.Step(DefaultClaimCheckPeriod)
	e.pass(ctx)
	e.wg.Wait()
	events := drain(rec)
	if len(events) != 1 || !strings.Contains(events[0], "Warning VolumeResizeFailed NodeExpandVolume.NodeExpandVolume failed for volume \"pv-1\" : Expander.NodeExpand failed to expand the volume : rpc error: code = Internal desc = disk on fire") {
		t.Errorf("events = %q", events)
	}
	pvc, _ := f.client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "claim", metav1.GetOptions{})
	if pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizeInProgress ||
		len(pvc.Status.Conditions) != 1 || pvc.Status.Conditions[0].Type != v1.PersistentVolumeClaimNodeResizeError {
		t.Errorf("claim status after failure = %+v", pvc.Status)
	}
	// Before the back-off nothing is tried; after it, the retry succeeds.
	if next := e.pass(ctx); next > expandInitialBackoff {
		t.Errorf("next look in %v, want within the back-off", next)
	}
	e.wg.Wait()
	if n := expandCalls(f); n != 1 {
		t.Fatalf("retried before the back-off: %d calls", n)
	}
	clk.Step(expandInitialBackoff)
	e.pass(ctx)
	e.wg.Wait()
	if n := expandCalls(f); n != 2 {
		t.Fatalf("NodeExpandVolume called %d times, want 2", n)
	}
	pvc, _ = f.client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "claim", metav1.GetOptions{})
	if got := pvc.Status.Capacity[v1.ResourceStorage]; got.Cmp(mustQ("2Gi")) != 0 || len(pvc.Status.AllocatedResourceStatuses) != 0 || len(pvc.Status.Conditions) != 0 {
		t.Errorf("claim status = %+v", pvc.Status)
	}
}

// TestOnlineExpansionWithoutCapability: a driver without EXPAND_VOLUME is
// never called; with a resize status the node's part fails as the
// kubelet's does (NodeResizeError), and is retried.
func TestOnlineExpansionWithoutCapability(t *testing.T) {
	f, clk := expandFixture(t, false)
	ctx := context.Background()
	rec := record.NewFakeRecorder(20)
	f.mgr.expand.rec = rec
	f.mgr.expand.pass(ctx)
	grow(t, f)
	clk.Step(DefaultClaimCheckPeriod)
	f.mgr.expand.pass(ctx)
	f.mgr.expand.wg.Wait()
	if n := expandCalls(f); n != 0 {
		t.Fatalf("driver without the capability called %d times", n)
	}
	events := drain(rec)
	if len(events) != 1 || !strings.Contains(events[0], "NodeExpand is not supported by the CSI driver "+testDriver) {
		t.Errorf("events = %q", events)
	}
}

// TestExpansionHintFromThePass: the claim and PV a pass read when it
// published are looked at at once, without reads of their own.
func TestExpansionHintFromThePass(t *testing.T) {
	f, clk := expandFixture(t, true)
	ctx := context.Background()
	rec := record.NewFakeRecorder(20)
	f.mgr.expand.rec = rec
	f.mgr.expand.pass(ctx) // first look: sizes agree
	grow(t, f)
	// A second pod of the claim is published: its pass read both anew. It
	// mounts the claim read-only, so its publish does not grow the volume
	// (a writable one would, as at any publish: TestExpansionAtMount).
	second := claimPod("uid-2", "claim")
	second.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = true
	if _, err := f.mgr.MountPod(ctx, second); err != nil {
		t.Fatal(err)
	}
	if n := expandCalls(f); n != 0 {
		t.Fatalf("the read-only publish grew the volume: %d calls", n)
	}
	f.client.ClearActions()
	_ = clk
	f.mgr.expand.pass(ctx)
	f.mgr.expand.wg.Wait()
	if n := expandCalls(f); n != 1 {
		t.Fatalf("NodeExpandVolume called %d times, want 1", n)
	}
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "get" {
			t.Errorf("expander read %s itself", a.GetResource().Resource)
		}
	}
}
