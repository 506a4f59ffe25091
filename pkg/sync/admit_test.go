package sync

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/admission"
)

func admitNode(cpu string) NodeGetter {
	return func(context.Context) (*v1.Node, error) {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("10")}}}, nil
	}
}

func withCPU(cpu string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}
	}
}

func withAdmission(t *testing.T, h *harness, cpu string) {
	t.Helper()
	a, err := admission.New(admission.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.w.d.cfg.Admitter, h.w.d.cfg.Node = a, admitNode(cpu)
}

func TestWorkerRejectsPodThatDoesNotFit(t *testing.T) {
	pod := basePod(withCPU("4"))
	h := newHarness(t, pod)
	withAdmission(t, h, "1900m")
	cg := &fakeCgroups{}
	h.w.d.cfg.Cgroups = cg

	h.sync(pod, false)
	if len(h.rt.Sandboxes) != 0 || len(cg.ensured) != 0 {
		t.Fatalf("a rejected pod got %d sandboxes and cgroups %v", len(h.rt.Sandboxes), cg.ensured)
	}
	st := h.status.final
	if st == nil || st.Phase != v1.PodFailed || st.Reason != "OutOfcpu" ||
		st.Message != "Pod was rejected: Node didn't have enough resource: cpu, requested: 4000, used: 0, capacity: 1900" {
		t.Fatalf("final status = %+v", st)
	}
	if st.QOSClass != v1.PodQOSBurstable {
		t.Errorf("qosClass = %q, want Burstable", st.QOSClass)
	}
	if ev := h.events(); !strings.Contains(ev, "Warning OutOfcpu Node didn't have enough resource: cpu") {
		t.Errorf("no OutOfcpu event:\n%s", ev)
	}
	h.sync(pod, false)
	if len(h.rt.Sandboxes) != 0 {
		t.Error("a rejected pod was started on a later pass")
	}
	if !h.w.ended.Load() || h.w.holds.Load() {
		t.Error("a rejected pod counts against the node")
	}
}

func TestWorkerAdmitsAgainstAdmittedPods(t *testing.T) {
	first := basePod(withCPU("1"))
	h := newHarness(t, first)
	withAdmission(t, h, "1900m")
	d := h.w.d
	d.workers[first.UID] = h.w
	h.sync(first, false)
	if h.status.final != nil || len(h.rt.Sandboxes) != 1 {
		t.Fatalf("the first pod was not admitted: %+v", h.status.final)
	}

	second := basePod(withCPU("1"))
	second.UID, second.Name = "uid-2", "p2"
	w2 := newWorker(d, second)
	d.workers[second.UID] = w2
	if w2.admit(context.Background(), second, nil) != rejected {
		t.Fatal("a pod that fits only without the admitted one was admitted")
	}
	if !strings.Contains(h.status.final.Message, "used: 1000, capacity: 1900") {
		t.Errorf("message = %q, want the first pod's request counted", h.status.final.Message)
	}

	// Once the first pod ended, its cpu is free again.
	h.w.setState(terminated)
	w3 := newWorker(d, second)
	if w3.admit(context.Background(), second, nil) != admitted {
		t.Error("a pod was rejected for the cpu of an ended pod")
	}
}

func TestWorkerDoesNotJudgeAPodAdmittedBefore(t *testing.T) {
	pod := basePod(withCPU("4"))
	h := newHarness(t, pod)
	withAdmission(t, h, "1")
	// An earlier run started it: it has a start time.
	now := metav1.Now()
	pod.Status.StartTime = &now
	h.sync(pod, false)
	if h.status.final != nil {
		t.Fatalf("a pod admitted by an earlier run was rejected: %+v", h.status.final)
	}
	if len(h.rt.Sandboxes) != 1 {
		t.Errorf("sandboxes = %d, want 1", len(h.rt.Sandboxes))
	}
	if got := h.w.d.admittedPods(types.UID("other")); len(got) != 0 {
		// The worker is not registered with the dispatcher in this test.
		t.Errorf("admittedPods = %d", len(got))
	}
}

func TestAdmissionWaitsForTheSource(t *testing.T) {
	pod := basePod(withCPU("1"))
	h := newHarness(t, pod)
	withAdmission(t, h, "1900m")
	synced := false
	h.w.d.listed = func() bool { return synced }
	if got := h.w.admit(context.Background(), pod, nil); got != undecided {
		t.Fatalf("admit before the source listed = %v, want undecided", got)
	}
	h.sync(pod, false)
	if len(h.rt.Sandboxes) != 0 || h.status.final != nil {
		t.Fatal("a pod was started or judged before the source listed every pod")
	}
	synced = true
	h.sync(pod, false)
	if len(h.rt.Sandboxes) != 1 {
		t.Errorf("sandboxes = %d once listed, want 1", len(h.rt.Sandboxes))
	}
}

func TestAdmissionFollowsCreationOrder(t *testing.T) {
	older := basePod(withCPU("1"))
	older.CreationTimestamp = metav1.NewTime(t0)
	h := newHarness(t, older)
	withAdmission(t, h, "1500m")
	d := h.w.d
	d.workers[older.UID] = h.w

	younger := basePod(withCPU("1"))
	younger.UID, younger.Name = "uid-2", "p2"
	younger.CreationTimestamp = metav1.NewTime(t0.Add(time.Second))
	wy := newWorker(d, younger)
	d.workers[younger.UID] = wy

	// The younger pod's worker runs first: it waits for the older pod.
	if got := wy.admit(context.Background(), younger, nil); got != undecided {
		t.Fatalf("younger pod judged before an older waiting one: %v", got)
	}
	select { // no wake-up pending yet
	case <-wy.wake:
	default:
	}
	if got := h.w.admit(context.Background(), older, nil); got != admitted {
		t.Fatalf("older pod: %v", got)
	}
	select {
	case <-wy.wake:
	default:
		t.Error("the waiting younger pod was not woken once the older was judged")
	}
	if got := wy.admit(context.Background(), younger, nil); got != rejected {
		t.Errorf("younger pod: %v, want rejected for the older one's cpu", got)
	}

	// A deleted older pod holds nobody up.
	third := basePod(withCPU("100m"))
	third.UID, third.CreationTimestamp = "uid-3", metav1.NewTime(t0.Add(2*time.Second))
	gone := basePod(withCPU("100m"))
	gone.UID, gone.CreationTimestamp = "uid-0", metav1.NewTime(t0.Add(-time.Second))
	now := metav1.Now()
	gone.DeletionTimestamp = &now
	d.workers[gone.UID] = newWorker(d, gone)
	if got := newWorker(d, third).admit(context.Background(), third, nil); got == undecided {
		t.Error("a deleted older pod held up admission")
	}
}
