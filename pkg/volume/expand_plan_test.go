package volume

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// expandBase is a claim of 1Gi grown to 2Gi by a resizer that now waits
// for the node: the PV says 2Gi, allocatedResources 2Gi, NodeResizePending.
func expandBase(mut ...func(*v1.PersistentVolumeClaim, *v1.PersistentVolume)) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"},
		Spec: v1.PersistentVolumeClaimSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: mustQ("2Gi")}}},
		Status: v1.PersistentVolumeClaimStatus{Capacity: v1.ResourceList{v1.ResourceStorage: mustQ("1Gi")},
			AllocatedResources:        v1.ResourceList{v1.ResourceStorage: mustQ("2Gi")},
			AllocatedResourceStatuses: map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}}}
	pv := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: mustQ("2Gi")}}}
	for _, m := range mut {
		m(pvc, pv)
	}
	return pvc, pv
}

func TestPlanExpansion(t *testing.T) {
	oneGi := expandKnown{size: mustQ("1Gi")}
	noStatus := func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
		pvc.Status.AllocatedResourceStatuses = nil
	}
	for _, tc := range []struct {
		name     string
		mut      func(*v1.PersistentVolumeClaim, *v1.PersistentVolume)
		readOnly bool
		known    expandKnown
		want     expandPlan
	}{
		{name: "node resize pending: marked in progress, expanded, finished", known: oneGi,
			want: expandPlan{action: expandRun, oldSize: mustQ("1Gi"), newSize: mustQ("2Gi"), markInProgress: true, finishClaim: true, recovery: true}},
		{name: "in progress after a restart: the same", known: oneGi,
			mut: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
				pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInProgress
			},
			want: expandPlan{action: expandRun, oldSize: mustQ("1Gi"), newSize: mustQ("2Gi"), markInProgress: true, finishClaim: true, recovery: true}},
		{name: "sizes agree", known: expandKnown{size: mustQ("2Gi")}, want: expandPlan{action: expandNone}},
		{name: "read-only in the pod", known: oneGi, readOnly: true, want: expandPlan{action: expandNone}},
		{name: "driver refused in use earlier", known: expandKnown{size: mustQ("1Gi"), inUse: true}, want: expandPlan{action: expandNone}},
		{name: "unknown size", want: expandPlan{action: expandNone}},
		{name: "controller still resizing", known: oneGi,
			mut: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
				pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimControllerResizeInProgress
			},
			want: expandPlan{action: expandWait}},
		{name: "node resize infeasible", known: oneGi,
			mut: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
				pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInfeasible
			},
			want: expandPlan{action: expandWait}},
		{name: "claim already has the size, no status: done without a call", known: oneGi,
			mut: func(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
				noStatus(pvc, pv)
				pvc.Status.Capacity[v1.ResourceStorage] = mustQ("2Gi")
			},
			want: expandPlan{action: expandDone, oldSize: mustQ("1Gi"), newSize: mustQ("2Gi")}},
		{name: "ReadWriteMany already grown elsewhere: expanded here, claim untouched", known: oneGi,
			mut: func(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
				noStatus(pvc, pv)
				pvc.Status.Capacity[v1.ResourceStorage] = mustQ("2Gi")
				pvc.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}
			},
			want: expandPlan{action: expandRun, oldSize: mustQ("1Gi"), newSize: mustQ("2Gi"), recovery: true, doneIfUnsupported: true}},
		{name: "allocated but no status: waits", known: oneGi, mut: noStatus, want: expandPlan{action: expandWait}},
		{name: "older resizer: to the PV's size, claim finished", known: oneGi,
			mut: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
				pvc.Status.AllocatedResourceStatuses, pvc.Status.AllocatedResources = nil, nil
			},
			want: expandPlan{action: expandRun, oldSize: mustQ("1Gi"), newSize: mustQ("2Gi"), finishClaim: true, doneIfUnsupported: true}},
		{name: "request changed after a final failure: infeasible on failure", known: expandKnown{size: mustQ("1Gi"), failedFinal: true},
			mut: func(pvc *v1.PersistentVolumeClaim, _ *v1.PersistentVolume) {
				pvc.Spec.Resources.Requests[v1.ResourceStorage] = mustQ("3Gi")
			},
			want: expandPlan{action: expandRun, oldSize: mustQ("1Gi"), newSize: mustQ("2Gi"), markInProgress: true, finishClaim: true, recovery: true, infeasibleOnFailure: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var muts []func(*v1.PersistentVolumeClaim, *v1.PersistentVolume)
			if tc.mut != nil {
				muts = append(muts, tc.mut)
			}
			pvc, pv := expandBase(muts...)
			got := planExpansion(pvc, pv, tc.readOnly, tc.known)
			if got.action != tc.want.action || got.oldSize.Cmp(tc.want.oldSize) != 0 || got.newSize.Cmp(tc.want.newSize) != 0 ||
				got.markInProgress != tc.want.markInProgress || got.finishClaim != tc.want.finishClaim || got.recovery != tc.want.recovery ||
				got.infeasibleOnFailure != tc.want.infeasibleOnFailure || got.doneIfUnsupported != tc.want.doneIfUnsupported {
				t.Errorf("plan = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestJudgeExpansion(t *testing.T) {
	recovery := expandPlan{action: expandRun, recovery: true}
	legacy := expandPlan{action: expandRun, doneIfUnsupported: true}
	for _, tc := range []struct {
		name string
		plan expandPlan
		err  error
		want expandVerdict
	}{
		{name: "success", plan: recovery, want: expandVerdict{done: true}},
		{name: "final error: condition, retry", plan: recovery, err: status.Error(codes.Internal, "x"),
			want: expandVerdict{final: true, markClaim: true, retry: true}},
		{name: "not found: infeasible", plan: recovery, err: status.Error(codes.NotFound, "x"),
			want: expandVerdict{final: true, markClaim: true, infeasible: true, retry: true}},
		{name: "timeout: not final, retry, claim untouched", plan: recovery, err: status.Error(codes.DeadlineExceeded, "x"),
			want: expandVerdict{retry: true}},
		{name: "in use: stop on this node", plan: recovery, err: status.Error(codes.FailedPrecondition, "x"),
			want: expandVerdict{final: true, inUse: true, markClaim: true}},
		{name: "unsupported with a resize status: failure", plan: recovery, err: errExpandUnsupported,
			want: expandVerdict{final: true, markClaim: true, retry: true}},
		{name: "unsupported, older resizer: done", plan: legacy, err: errExpandUnsupported, want: expandVerdict{done: true}},
		{name: "older resizer, final error: retry, claim untouched", plan: legacy, err: status.Error(codes.Internal, "x"),
			want: expandVerdict{final: true, retry: true}},
		{name: "older resizer, in use: done here", plan: legacy, err: status.Error(codes.FailedPrecondition, "x"),
			want: expandVerdict{final: true, inUse: true, done: true}},
		{name: "no gRPC status (driver gone): retry", plan: recovery, err: errors.New("driver name x not found"),
			want: expandVerdict{retry: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeExpansion(tc.plan, tc.err); got != tc.want {
				t.Errorf("verdict = %+v, want %+v", got, tc.want)
			}
		})
	}
}
