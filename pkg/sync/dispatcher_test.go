package sync

import (
	"context"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The garbage collector trims only the pods PodsHeld says run; what a pod
// being admitted, ending or cleaning up keeps is its worker's.
func TestPodsHeldSaysWhichPodsRun(t *testing.T) {
	runs := named("uid-run", "run", t0, withCPU("1"))
	h := newHarness(t, runs)
	withAdmission(t, h, "1500m")
	rejected := named("uid-rejected", "rejected", t0.Add(time.Second), withCPU("1"))
	deleted := named("uid-deleted", "deleted", t0.Add(2*time.Second), withCPU("100m"))
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	ended := named("uid-ended", "ended", t0.Add(3*time.Second), withCPU("100m"), func(p *v1.Pod) {
		p.Status.Phase, p.Status.StartTime = v1.PodSucceeded, &now
	})
	removed := named("uid-removed", "removed", t0.Add(4*time.Second), withCPU("100m"))
	for _, p := range []*v1.Pod{runs, rejected, deleted, ended, removed} {
		h.d.UpsertPod(p)
	}
	h.d.admitPending(context.Background(), true)
	h.d.RemovePod(removed)
	// Listed after the judging: it waits for the next round.
	waiting := named("uid-waiting", "waiting", t0.Add(5*time.Second), withCPU("100m"))
	h.d.UpsertPod(waiting)

	want := map[types.UID]bool{
		runs.UID: true, rejected.UID: false, deleted.UID: false, ended.UID: false,
		removed.UID: false, waiting.UID: false,
	}
	if got := h.d.PodsHeld(); !reflect.DeepEqual(got, want) {
		t.Errorf("PodsHeld() = %v, want %v", got, want)
	}
}
