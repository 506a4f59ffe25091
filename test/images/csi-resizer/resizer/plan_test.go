package resizer

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const testDriver = "fake.csi.example.com"

// boundClaim is a claim of 1Gi bound to its PV of 1Gi, of testDriver, asking for size.
func boundClaim(size string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data", UID: "uid-data", ResourceVersion: "1"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}},
			VolumeName:  "pv-data",
		},
		Status: v1.PersistentVolumeClaimStatus{
			Phase:       v1.ClaimBound,
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
		},
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-data", ResourceVersion: "1"},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: testDriver, VolumeHandle: "vol-1", FSType: "ext4",
			}},
			ClaimRef:                      &v1.ObjectReference{Namespace: "ns", Name: "data", UID: "uid-data"},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeBound},
	}
	return pvc, pv
}

func withStatus(s v1.ClaimResourceStatus) func(*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	return func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) { setResizeStatus(pvc, s) }
}

func withAllocated(size string) func(*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	return func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
		pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}
	}
}

func withPVSize(size string) func(*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	return func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
		pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse(size)
	}
}

func TestPlanResize(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const slowRetry = 5 * time.Minute
	type mutator = func(*v1.PersistentVolumeClaim, *v1.PersistentVolume)
	for _, tc := range []struct {
		name        string
		request     string // default 2Gi
		mutate      []mutator
		nodeOnly    bool
		history     history
		want        action
		wantSize    string
		wantNew     bool
		wantDelay   time.Duration
		wantHistory history
	}{
		{name: "a new request", want: actExpand, wantSize: "2Gi", wantNew: true},
		{name: "no more than the capacity", request: "1Gi", want: actNone},
		{name: "not bound", mutate: []mutator{func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) { pvc.Status.Phase = v1.ClaimPending }}, want: actNone},
		{name: "another driver's volume", mutate: []mutator{func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) { pv.Spec.CSI.Driver = "other" }}, want: actNone},
		{name: "not a CSI volume", mutate: []mutator{func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
			pv.Spec.CSI = nil
			pv.Spec.HostPath = &v1.HostPathVolumeSource{Path: "/x"}
		}}, want: actNone},
		{name: "PV bound to another claim", mutate: []mutator{func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) { pv.Spec.ClaimRef.UID = "other" }}, want: actNone},
		{name: "PV without a claim", mutate: []mutator{func(_ *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) { pv.Spec.ClaimRef = nil }}, want: actNone},

		// The volume is smaller than the request.
		{name: "growing again after a node expansion finished", request: "3Gi", mutate: []mutator{withAllocated("2Gi"), withPVSize("2Gi")},
			want: actExpand, wantSize: "3Gi", wantNew: true},
		{name: "the node is still to grow it", request: "3Gi", mutate: []mutator{withAllocated("2Gi"), withPVSize("2Gi"), withStatus(v1.PersistentVolumeClaimNodeResizePending)},
			want: actNone},
		{name: "the node is growing it", request: "3Gi", mutate: []mutator{withAllocated("2Gi"), withPVSize("2Gi"), withStatus(v1.PersistentVolumeClaimNodeResizeInProgress)},
			want: actNone},
		{name: "node pending but the PV short of the allocated size", request: "3Gi", mutate: []mutator{withAllocated("2Gi"), withStatus(v1.PersistentVolumeClaimNodeResizePending)},
			want: actExpand, wantSize: "2Gi"},
		{name: "node infeasible: the allocated size first", request: "3Gi", mutate: []mutator{withAllocated("2Gi"), withPVSize("2Gi"), withStatus(v1.PersistentVolumeClaimNodeResizeInfeasible)},
			want: actExpand, wantSize: "2Gi"},
		{name: "controller in progress, outcome unknown: the allocated size", request: "3Gi", mutate: []mutator{withAllocated("11Gi"), withStatus(v1.PersistentVolumeClaimControllerResizeInProgress)},
			want: actExpand, wantSize: "11Gi"},
		{name: "controller in progress after a final error: the lowered request", request: "3Gi", history: history{finalError: true},
			mutate: []mutator{withAllocated("11Gi"), withStatus(v1.PersistentVolumeClaimControllerResizeInProgress)}, want: actExpand, wantSize: "3Gi", wantNew: true, wantHistory: history{finalError: true}},
		{name: "controller infeasible, request lowered", request: "4Gi", history: history{finalError: true, infeasibleSince: now.Add(-time.Second)},
			mutate: []mutator{withAllocated("11Gi"), withStatus(v1.PersistentVolumeClaimControllerResizeInfeasible)}, want: actExpand, wantSize: "4Gi", wantNew: true, wantHistory: history{finalError: true, infeasibleSince: now.Add(-time.Second)}},
		{name: "controller infeasible, first seen: tried once more at once", request: "11Gi", history: history{finalError: true},
			mutate: []mutator{withAllocated("11Gi"), withStatus(v1.PersistentVolumeClaimControllerResizeInfeasible)}, want: actExpand, wantSize: "11Gi", wantHistory: history{finalError: true, infeasibleSince: now}},
		{name: "controller infeasible, seen before: wait", request: "11Gi", history: history{finalError: true, infeasibleSince: now.Add(-time.Minute)},
			mutate: []mutator{withAllocated("11Gi"), withStatus(v1.PersistentVolumeClaimControllerResizeInfeasible)}, want: actWait, wantSize: "11Gi", wantDelay: 4 * time.Minute, wantHistory: history{finalError: true, infeasibleSince: now.Add(-time.Minute)}},
		{name: "controller infeasible, wait over: tried again", request: "11Gi", history: history{finalError: true, infeasibleSince: now.Add(-slowRetry)},
			mutate: []mutator{withAllocated("11Gi"), withStatus(v1.PersistentVolumeClaimControllerResizeInfeasible)}, want: actExpand, wantSize: "11Gi", wantHistory: history{finalError: true, infeasibleSince: now}},

		// The volume has the request's size already.
		{name: "grown, the node's turn", mutate: []mutator{withAllocated("2Gi"), withPVSize("2Gi"), withStatus(v1.PersistentVolumeClaimNodeResizePending)},
			want: actNone},
		{name: "grown, node infeasible after a lowered request: the allocated size", request: "2Gi",
			mutate: []mutator{withAllocated("3Gi"), withPVSize("3Gi"), withStatus(v1.PersistentVolumeClaimNodeResizeInfeasible)}, want: actExpand, wantSize: "3Gi"},
		{name: "node-only, node infeasible after a lowered request: the request", request: "2Gi", nodeOnly: true,
			mutate: []mutator{withAllocated("3Gi"), withPVSize("3Gi"), withStatus(v1.PersistentVolumeClaimNodeResizeInfeasible)}, want: actExpand, wantSize: "2Gi", wantNew: true},
		{name: "grown but not recorded", mutate: []mutator{withAllocated("2Gi"), withPVSize("2Gi"), withStatus(v1.PersistentVolumeClaimControllerResizeInProgress)},
			want: actExpand, wantSize: "2Gi"},
		{name: "no status but allocated", mutate: []mutator{withAllocated("2Gi"), withPVSize("2Gi")},
			want: actExpand, wantSize: "2Gi"},
		{name: "no status, bound to a grown PV (pre-resize capacity)", mutate: []mutator{withPVSize("2Gi")},
			want: actExpand, wantSize: "2Gi", wantNew: true},
		{name: "grown by a resizer without status, the node pending", mutate: []mutator{withPVSize("2Gi"), func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
			pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue}}
		}}, want: actNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			request := tc.request
			if request == "" {
				request = "2Gi"
			}
			pvc, pv := boundClaim(request)
			for _, m := range tc.mutate {
				m(pvc, pv)
			}
			p := planResize(pvc, pv, testDriver, !tc.nodeOnly, tc.history, now, slowRetry)
			if p.action != tc.want {
				t.Fatalf("action = %v, want %v (plan %+v)", p.action, tc.want, p)
			}
			if tc.wantSize != "" && p.size.Cmp(resource.MustParse(tc.wantSize)) != 0 {
				t.Errorf("size = %s, want %s", p.size.String(), tc.wantSize)
			}
			if p.newStatus != tc.wantNew {
				t.Errorf("newStatus = %t, want %t", p.newStatus, tc.wantNew)
			}
			if p.delay != tc.wantDelay {
				t.Errorf("delay = %s, want %s", p.delay, tc.wantDelay)
			}
			if !p.history.infeasibleSince.Equal(tc.wantHistory.infeasibleSince) || p.history.finalError != tc.wantHistory.finalError {
				t.Errorf("history = %+v, want %+v", p.history, tc.wantHistory)
			}
		})
	}
}

func TestHistoryAfterExpand(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	before := history{finalError: true, infeasibleSince: since}
	for _, tc := range []struct {
		name string
		err  error
		want history
	}{
		{name: "grown", want: history{}},
		{name: "not the driver's answer", err: errTest, want: history{}},
		{name: "timed out", err: status.Error(codes.DeadlineExceeded, "slow"), want: history{}},
		{name: "driver busy", err: status.Error(codes.Aborted, "busy"), want: history{}},
		{name: "infeasible keeps the wait", err: status.Error(codes.OutOfRange, "too big"), want: history{finalError: true, infeasibleSince: since}},
		{name: "final", err: status.Error(codes.PermissionDenied, "no"), want: history{finalError: true}},
		{name: "in use is final", err: status.Error(codes.FailedPrecondition, "in use"), want: history{finalError: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := before.afterExpand(tc.err); got != tc.want {
				t.Errorf("afterExpand = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestClaimChanged(t *testing.T) {
	base, _ := boundClaim("2Gi")
	for _, tc := range []struct {
		name   string
		mutate func(*v1.PersistentVolumeClaim)
		want   bool
	}{
		{name: "resync (same resourceVersion)", mutate: func(*v1.PersistentVolumeClaim) {}, want: true},
		{name: "labels only", mutate: func(c *v1.PersistentVolumeClaim) { c.Labels = map[string]string{"a": "b"} }, want: false},
		{name: "the resizer's own condition", mutate: func(c *v1.PersistentVolumeClaim) {
			c.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimControllerResizeError, Status: v1.ConditionTrue}}
		}, want: false},
		{name: "request grown", mutate: func(c *v1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("3Gi")
		}, want: true},
		{name: "request lowered", mutate: func(c *v1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("1500Mi")
		}, want: true},
		{name: "capacity grown", mutate: func(c *v1.PersistentVolumeClaim) { c.Status.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi") }, want: true},
		{name: "resize status", mutate: func(c *v1.PersistentVolumeClaim) { setResizeStatus(c, v1.PersistentVolumeClaimNodeResizeInfeasible) }, want: true},
		{name: "resizer annotation", mutate: func(c *v1.PersistentVolumeClaim) { c.Annotations = map[string]string{annResizer: testDriver} }, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tc.mutate(cur)
			if tc.name != "resync (same resourceVersion)" {
				cur.ResourceVersion = "2"
			}
			if got := claimChanged(base, cur); got != tc.want {
				t.Errorf("claimChanged = %t, want %t", got, tc.want)
			}
		})
	}
}
