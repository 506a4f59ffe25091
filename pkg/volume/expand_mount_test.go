package volume

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
)

// offlineGrown is a claim of 1Gi whose volume the resizer grew to 2Gi while
// no pod used it: the PV says 2Gi, the claim waits for the node.
func offlineGrown() (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc, pv := boundClaim("claim", "pv-1")
	pvc.ResourceVersion = "1"
	pvc.Spec.Resources.Requests = v1.ResourceList{v1.ResourceStorage: mustQ("2Gi")}
	pvc.Status.Capacity = v1.ResourceList{v1.ResourceStorage: mustQ("1Gi")}
	pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: mustQ("2Gi")}
	pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
	pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: mustQ("2Gi")}
	return pvc, pv
}

// mountFixture is a CSI fixture whose driver can expand, with stage as
// told, and a recorder for the expansion's events.
func mountFixture(t *testing.T, stage bool, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) (*csiFixture, *record.FakeRecorder) {
	t.Helper()
	f := newCSIFixture(t, false, pvc, pv, csiDriverObject(false, false))
	f.driver.Expand, f.driver.Stage = true, stage
	if err := f.reg.Register(context.Background(), testDriver, f.sock, []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(20)
	f.mgr.expand.rec = rec
	return f, rec
}

func claimNow(t *testing.T, f *csiFixture) *v1.PersistentVolumeClaim {
	t.Helper()
	pvc, err := f.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "claim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}

// TestExpansionAtMount: a claim that waits for the node (NodeResizePending,
// the PV bigger than the claim's capacity) when a pod publishes its volume
// is grown by that publish, after NodePublishVolume, with the publish
// target as the volume path and, for a driver with STAGE_UNSTAGE, the
// staging directory; the claim gets the new capacity and loses its resize
// status, the pod and the claim the kubelet's events; nothing is asked
// again later, at the next sync or by online expansion.
func TestExpansionAtMount(t *testing.T) {
	for _, stage := range []bool{true, false} {
		name := "stage-unstage"
		if !stage {
			name = "publish only"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			pvc, pv := offlineGrown()
			f, rec := mountFixture(t, stage, pvc, pv)
			pod := claimPod("uid-a", "claim")
			if _, err := f.mgr.MountPod(ctx, pod); err != nil {
				t.Fatal(err)
			}
			want := []string{"NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1", "NodeExpandVolume handle-pv-1"}
			if !stage {
				want = want[1:]
			}
			if got := f.driver.Calls(); !slices.Equal(got, want) {
				t.Fatalf("calls = %v, want %v", got, want)
			}
			req := f.driver.Last("NodeExpandVolume").(*csipb.NodeExpandVolumeRequest)
			wantStaging := ""
			if stage {
				wantStaging = f.driver.Last("NodeStageVolume").(*csipb.NodeStageVolumeRequest).GetStagingTargetPath()
			}
			if req.GetVolumeId() != "handle-pv-1" || req.GetCapacityRange().GetRequiredBytes() != 2<<30 ||
				req.GetVolumePath() != filepath.Join(f.root, "pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount") ||
				req.GetStagingTargetPath() != wantStaging || req.GetVolumeCapability().GetMount() == nil {
				t.Fatalf("NodeExpandVolume request = %v (staging path want %q)", req, wantStaging)
			}
			got := claimNow(t, f)
			if size := got.Status.Capacity[v1.ResourceStorage]; size.Cmp(mustQ("2Gi")) != 0 || len(got.Status.AllocatedResourceStatuses) != 0 {
				t.Fatalf("claim status = %+v", got.Status)
			}
			events := drain(rec)
			const msg = `Normal FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv-1" node-a`
			if len(events) != 2 || !strings.HasPrefix(events[0], msg) || !strings.HasPrefix(events[1], msg) {
				t.Fatalf("events = %q", events)
			}

			if _, err := f.mgr.MountPod(ctx, pod); err != nil {
				t.Fatal(err)
			}
			f.mgr.expand.pass(ctx)
			f.mgr.expand.wg.Wait()
			if n := expandCalls(f); n != 1 {
				t.Fatalf("NodeExpandVolume called %d times, want once", n)
			}
		})
	}
}

// TestExpansionAtMountFailure: a NodeExpandVolume that fails fails the
// publish with the kubelet's words, after NodePublishVolume as the
// kubelet's does, so the pod gets no mount and does not start; the claim
// records the failure. The next pass finds the volume published and
// expands it again, which succeeds and finishes the claim.
func TestExpansionAtMountFailure(t *testing.T) {
	ctx := context.Background()
	pvc, pv := offlineGrown()
	f, rec := mountFixture(t, true, pvc, pv)
	f.driver.ExpandErrs = []error{status.Error(codes.Internal, "disk on fire")}
	pod := claimPod("uid-a", "claim")

	mounts, err := f.mgr.MountPod(ctx, pod)
	const want = `MountVolume.Setup failed while expanding volume for volume "pv-1" : ` +
		`Expander.NodeExpand failed to expand the volume : rpc error: code = Internal desc = disk on fire`
	var me *MountError
	if !errors.As(err, &me) || me.Volume != "data" || me.Error() != want {
		t.Fatalf("err = %q, want %q", err, want)
	}
	if _, ok := mounts["data"]; ok {
		t.Fatal("the volume was handed to the pod though its expansion failed")
	}
	if got := f.driver.Calls(); !slices.Equal(got, []string{"NodeStageVolume handle-pv-1", "NodePublishVolume handle-pv-1", "NodeExpandVolume handle-pv-1"}) {
		t.Fatalf("calls = %v", got)
	}
	got := claimNow(t, f)
	if got.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizeInProgress ||
		len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != v1.PersistentVolumeClaimNodeResizeError {
		t.Fatalf("claim status after the failure = %+v", got.Status)
	}
	// The failure is the pod's FailedMount (the worker records the
	// MountError), not a resize event.
	if events := drain(rec); len(events) != 0 {
		t.Fatalf("events = %q", events)
	}
	// Online expansion leaves a volume it does not see published alone.
	f.mgr.expand.pass(ctx)
	f.mgr.expand.wg.Wait()
	if n := expandCalls(f); n != 1 {
		t.Fatalf("NodeExpandVolume called %d times before the retry", n)
	}

	mounts, err = f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mounts["data"]; !ok {
		t.Fatal("no mount after the retry")
	}
	if got := f.driver.Calls()[3:]; !slices.Equal(got, []string{"NodeExpandVolume handle-pv-1"}) {
		t.Fatalf("calls of the retry = %v, want the expansion alone", got)
	}
	got = claimNow(t, f)
	if size := got.Status.Capacity[v1.ResourceStorage]; size.Cmp(mustQ("2Gi")) != 0 || len(got.Status.AllocatedResourceStatuses) != 0 || len(got.Status.Conditions) != 0 {
		t.Fatalf("claim status after the retry = %+v", got.Status)
	}
	if events := drain(rec); len(events) != 2 || !strings.Contains(events[0], "FileSystemResizeSuccessful") {
		t.Fatalf("events of the retry = %q", events)
	}
}

// TestExpansionAtMountNotDue: what a publish leaves alone, as the kubelet
// does: a claim whose capacity is the PV's, a resize still in the
// controller's hands, a driver that cannot grow the volume in use
// (FailedPrecondition: the mount goes on), and a pod that mounts the claim
// read-only (the kubelet's FileSystemResizeFailed events); a claim of an
// older resizer (no resize status) is grown and finished.
func TestExpansionAtMountNotDue(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(*v1.PersistentVolumeClaim, *v1.PersistentVolume, *v1.Pod)
		expandErr  error
		wantCalls  int
		wantStatus v1.ClaimResourceStatus
		wantEvents []string
	}{
		{name: "sizes agree", mutate: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume, _ *v1.Pod) {
			pvc.Status.Capacity[v1.ResourceStorage] = mustQ("2Gi")
			pvc.Status.AllocatedResourceStatuses = nil
		}},
		{name: "controller resize in progress", mutate: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume, _ *v1.Pod) {
			pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimControllerResizeInProgress
		}, wantStatus: v1.PersistentVolumeClaimControllerResizeInProgress},
		{name: "refused in use", expandErr: status.Error(codes.FailedPrecondition, "busy"), wantCalls: 1,
			wantStatus: v1.PersistentVolumeClaimNodeResizeInProgress},
		{name: "read-only", mutate: func(_ *v1.PersistentVolumeClaim, _ *v1.PersistentVolume, pod *v1.Pod) {
			pod.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = true
		}, wantStatus: v1.PersistentVolumeClaimNodeResizePending, wantEvents: []string{
			`Warning FileSystemResizeFailed MountVolume.NodeExpandVolume failed for volume "pv-1" requested read-only file system`,
			`Warning FileSystemResizeFailed MountVolume.NodeExpandVolume failed for volume "pv-1" requested read-only file system`,
		}},
		{name: "older resizer", mutate: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume, _ *v1.Pod) {
			pvc.Status.AllocatedResources, pvc.Status.AllocatedResourceStatuses = nil, nil
		}, wantCalls: 1, wantEvents: []string{
			`Normal FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv-1" node-a`,
			`Normal FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv-1" node-a`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			pvc, pv := offlineGrown()
			pod := claimPod("uid-a", "claim")
			if tt.mutate != nil {
				tt.mutate(pvc, pv, pod)
			}
			f, rec := mountFixture(t, true, pvc, pv)
			if tt.expandErr != nil {
				f.driver.ExpandErrs = []error{tt.expandErr}
			}
			if _, err := f.mgr.MountPod(ctx, pod); err != nil {
				t.Fatal(err)
			}
			if n := expandCalls(f); n != tt.wantCalls {
				t.Errorf("NodeExpandVolume called %d times, want %d", n, tt.wantCalls)
			}
			got := claimNow(t, f)
			if s := got.Status.AllocatedResourceStatuses[v1.ResourceStorage]; s != tt.wantStatus {
				t.Errorf("claim resize status = %q, want %q", s, tt.wantStatus)
			}
			events := drain(rec)
			if len(events) != len(tt.wantEvents) {
				t.Fatalf("events = %q, want %q", events, tt.wantEvents)
			}
			for i := range events {
				if !strings.HasPrefix(events[i], tt.wantEvents[i]) {
					t.Errorf("event %d = %q, want %q", i, events[i], tt.wantEvents[i])
				}
			}
		})
	}
}
