package resizer

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var errTest = errors.New("test error")

func conditionTypes(conds []v1.PersistentVolumeClaimCondition) []v1.PersistentVolumeClaimConditionType {
	var out []v1.PersistentVolumeClaimConditionType
	for _, c := range conds {
		out = append(out, c.Type)
	}
	return out
}

func TestSetResizeConditions(t *testing.T) {
	cond := func(t v1.PersistentVolumeClaimConditionType, msg string) v1.PersistentVolumeClaimCondition {
		return v1.PersistentVolumeClaimCondition{Type: t, Status: v1.ConditionTrue, Message: msg}
	}
	const modifying = v1.PersistentVolumeClaimVolumeModifyingVolume
	old := []v1.PersistentVolumeClaimCondition{
		cond(v1.PersistentVolumeClaimNodeResizeError, "old"),
		cond(modifying, "other kind"),
		cond(v1.PersistentVolumeClaimResizing, "old"),
	}
	for _, tc := range []struct {
		name string
		keep bool
		set  []v1.PersistentVolumeClaimCondition
		want []v1.PersistentVolumeClaimConditionType
	}{
		{name: "drop all resize conditions", want: []v1.PersistentVolumeClaimConditionType{modifying}},
		{name: "replace in place, drop the rest", set: []v1.PersistentVolumeClaimCondition{cond(v1.PersistentVolumeClaimResizing, "new")},
			want: []v1.PersistentVolumeClaimConditionType{modifying, v1.PersistentVolumeClaimResizing}},
		{name: "keep the rest, add new at the end", keep: true, set: []v1.PersistentVolumeClaimCondition{cond(v1.PersistentVolumeClaimFileSystemResizePending, "new")},
			want: []v1.PersistentVolumeClaimConditionType{v1.PersistentVolumeClaimNodeResizeError, modifying, v1.PersistentVolumeClaimResizing, v1.PersistentVolumeClaimFileSystemResizePending}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := setResizeConditions(old, tc.keep, tc.set...)
			if !slices.Equal(conditionTypes(got), tc.want) {
				t.Errorf("conditions = %v, want %v", conditionTypes(got), tc.want)
			}
			for _, c := range got {
				if c.Type == v1.PersistentVolumeClaimResizing && len(tc.set) > 0 && tc.set[0].Type == c.Type && c.Message != "new" {
					t.Errorf("Resizing kept the old condition, not the new one")
				}
			}
		})
	}
	if old[2].Message != "old" {
		t.Error("the old conditions were changed in place")
	}
}

// TestClaimSteps follows a claim through the writes of an expansion that ends on the node,
// then through a failed one.
func TestClaimSteps(t *testing.T) {
	now := metav1.Now()
	pvc, _ := boundClaim("2Gi")
	pvc.Annotations = map[string]string{annNodeExpansionNotRequired: "true"}
	pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue}}

	started := resizeStarted(pvc, resource.MustParse("2Gi"), true, now)
	if got := started.Status.AllocatedResourceStatuses[v1.ResourceStorage]; got != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Errorf("status = %q", got)
	}
	if got := started.Status.AllocatedResources[v1.ResourceStorage]; got.String() != "2Gi" {
		t.Errorf("allocated = %s", got.String())
	}
	if got := conditionTypes(started.Status.Conditions); !slices.Equal(got, []v1.PersistentVolumeClaimConditionType{v1.PersistentVolumeClaimResizing}) {
		t.Errorf("conditions = %v", got)
	}
	if _, ok := started.Annotations[annNodeExpansionNotRequired]; ok {
		t.Error("the node-expansion-not-required annotation stayed")
	}
	if pvc.Status.AllocatedResources != nil || len(pvc.Status.Conditions) != 1 {
		t.Error("resizeStarted changed its argument")
	}

	// A repeated try keeps what the claim says.
	again := resizeStarted(pvc, resource.MustParse("2Gi"), false, now)
	if _, ok := again.Status.AllocatedResourceStatuses[v1.ResourceStorage]; ok {
		t.Error("a repeated try set a resize status")
	}
	if got := conditionTypes(again.Status.Conditions); !slices.Equal(got, []v1.PersistentVolumeClaimConditionType{v1.PersistentVolumeClaimNodeResizeError, v1.PersistentVolumeClaimResizing}) {
		t.Errorf("conditions of a repeated try = %v", got)
	}

	pending := nodeResizePending(started, now)
	if got := pending.Status.AllocatedResourceStatuses[v1.ResourceStorage]; got != v1.PersistentVolumeClaimNodeResizePending {
		t.Errorf("status = %q", got)
	}
	if !hasCondition(pending, v1.PersistentVolumeClaimFileSystemResizePending) {
		t.Error("no FileSystemResizePending condition")
	}

	done := resizeFinished(started, resource.MustParse("2Gi"))
	if done.Status.AllocatedResourceStatuses != nil || len(done.Status.Conditions) != 0 {
		t.Errorf("finished claim keeps %v and %v", done.Status.AllocatedResourceStatuses, done.Status.Conditions)
	}
	if got := done.Status.Capacity[v1.ResourceStorage]; got.String() != "2Gi" {
		t.Errorf("capacity = %s", got.String())
	}
	if done.Annotations[annNodeExpansionNotRequired] != "true" {
		t.Error("no node-expansion-not-required annotation")
	}

	infeasible := controllerResizeFailed(started, status.Error(codes.OutOfRange, "too big"), true, now)
	if got := infeasible.Status.AllocatedResourceStatuses[v1.ResourceStorage]; got != v1.PersistentVolumeClaimControllerResizeInfeasible {
		t.Errorf("status = %q", got)
	}
	final := controllerResizeFailed(started, status.Error(codes.PermissionDenied, "no"), false, now)
	if got := final.Status.AllocatedResourceStatuses[v1.ResourceStorage]; got != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Errorf("status after a final error = %q", got)
	}
	if got := conditionTypes(final.Status.Conditions); !slices.Equal(got, []v1.PersistentVolumeClaimConditionType{v1.PersistentVolumeClaimResizing, v1.PersistentVolumeClaimControllerResizeError}) {
		t.Errorf("conditions after a final error = %v", got)
	}
}

func TestVolumeGrown(t *testing.T) {
	_, pv := boundClaim("2Gi")
	grown := volumeGrown(pv, resource.MustParse("2Gi"), resource.MustParse("1Gi"), true)
	if got := grown.Spec.Capacity[v1.ResourceStorage]; got.String() != "2Gi" {
		t.Errorf("capacity = %s", got.String())
	}
	if got := grown.Annotations[annPreResizeCapacity]; got != "1Gi" {
		t.Errorf("pre-resize annotation = %q", got)
	}
	// A second expansion before the node finished keeps the first one's capacity.
	again := volumeGrown(grown, resource.MustParse("3Gi"), resource.MustParse("2Gi"), true)
	if got := again.Annotations[annPreResizeCapacity]; got != "1Gi" {
		t.Errorf("pre-resize annotation after a second expansion = %q", got)
	}
	if plain := volumeGrown(pv, resource.MustParse("2Gi"), resource.MustParse("1Gi"), false); plain.Annotations != nil {
		t.Errorf("annotations without AnnotateFsResize: %v", plain.Annotations)
	}
}
