package sync

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/admission"
	"github.com/nodeagent/nodeagent/pkg/runtime"
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
	h.d.cfg.Admitter, h.d.cfg.Node = a, admitNode(cpu)
}

// admitted hands pod to the dispatcher, judges what is pending, and
// returns the pod's worker (nil when it still waits).
func (h *harness) admitted(pod *v1.Pod) *Worker {
	h.t.Helper()
	h.d.UpsertPod(pod)
	h.d.admitPending(context.Background(), true)
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	return h.d.workers[pod.UID]
}

func named(uid, name string, created time.Time, mut ...func(*v1.Pod)) *v1.Pod {
	p := basePod(mut...)
	p.UID, p.Name, p.CreationTimestamp = types.UID(uid), name, metav1.NewTime(created)
	return p
}

func TestDispatcherRejectsPodThatDoesNotFit(t *testing.T) {
	pod := basePod(withCPU("4"), func(p *v1.Pod) { p.Generation = 2 })
	h := newHarness(t, pod)
	withAdmission(t, h, "1900m")
	cg := &fakeCgroups{}
	h.w.deps.cgroups = cg

	h.w = h.admitted(pod)
	if h.w == nil || !h.w.ended.Load() {
		t.Fatal("a rejected pod got no worker, or one that counts against the node")
	}
	h.sync(pod, false)
	if len(h.rt.Sandboxes) != 0 || len(cg.ensured) != 0 {
		t.Fatalf("a rejected pod got %d sandboxes and cgroups %v", len(h.rt.Sandboxes), cg.ensured)
	}
	st := h.status.final
	if st == nil || st.Phase != v1.PodFailed || st.Reason != "OutOfcpu" ||
		st.Message != "Pod was rejected: Node didn't have enough resource: cpu, requested: 4000, used: 0, capacity: 1900" {
		t.Fatalf("final status = %+v", st)
	}
	if st.QOSClass != v1.PodQOSBurstable || st.ObservedGeneration != 2 || len(st.ContainerStatuses) != 0 {
		t.Errorf("final status = %+v, want the bare refusal of generation 2 with qosClass Burstable", st)
	}
	if ev := h.events(); !strings.Contains(ev, "Warning OutOfcpu Node didn't have enough resource: cpu") {
		t.Errorf("no OutOfcpu event:\n%s", ev)
	}
	h.sync(pod, false)
	if len(h.rt.Sandboxes) != 0 {
		t.Error("a rejected pod was started on a later pass")
	}

	// Its deletion is confirmed like any pod's.
	deleted := pod.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	h.status.final = nil
	h.sync(deleted, false)
	if h.status.final == nil || h.status.final.Reason != "OutOfcpu" {
		t.Errorf("deletion of a rejected pod confirmed with %+v, want its refusal", h.status.final)
	}
}

func TestDispatcherAdmitsAgainstAdmittedPods(t *testing.T) {
	first := named("uid-1", "p1", t0, withCPU("1"))
	h := newHarness(t, first)
	withAdmission(t, h, "1900m")
	w1 := h.admitted(first)
	if w1 == nil || w1.ended.Load() {
		t.Fatal("the first pod was not admitted")
	}

	second := named("uid-2", "p2", t0.Add(time.Second), withCPU("1"))
	w2 := h.admitted(second)
	if w2 == nil || !w2.ended.Load() || !strings.Contains(w2.state.end.message, "used: 1000, capacity: 1900") {
		t.Fatalf("a pod that fits only without the admitted one: worker %v, want rejected counting the first pod's cpu", w2)
	}

	// Once the first pod ended, its cpu is free again.
	w1.ended.Store(true)
	third := named("uid-3", "p3", t0.Add(2*time.Second), withCPU("1"))
	if w3 := h.admitted(third); w3 == nil || w3.ended.Load() {
		t.Error("a pod was rejected for the cpu of an ended pod")
	}
}

func TestDispatcherDoesNotJudgeAPodAdmittedBefore(t *testing.T) {
	pod := basePod(withCPU("4"))
	h := newHarness(t, pod)
	withAdmission(t, h, "1")
	// An earlier run started it: it has a start time.
	now := metav1.Now()
	pod.Status.StartTime = &now
	h.d.UpsertPod(pod)
	h.d.mu.Lock()
	w, pending := h.d.workers[pod.UID], len(h.d.pending)
	h.d.mu.Unlock()
	if w == nil || pending != 0 {
		t.Fatalf("a pod admitted by an earlier run waits for admission (pending %d)", pending)
	}
	h.w = w
	h.sync(pod, false)
	if h.status.final != nil || len(h.rt.Sandboxes) != 1 {
		t.Fatalf("a pod admitted by an earlier run was not run: final %+v, %d sandboxes", h.status.final, len(h.rt.Sandboxes))
	}
}

// A pod the runtime or the disk already holds something of (an earlier run started it but
// died before its status said so) is not judged again: KnownPod is asked of that pod alone,
// and the list of every known pod is not read.
func TestDispatcherAsksKnownPodOfANewPod(t *testing.T) {
	pod := basePod(withCPU("4"))
	h := newHarness(t, pod)
	withAdmission(t, h, "1")
	var asked []types.UID
	h.d.cfg.KnownPod = func(uid types.UID) bool { asked = append(asked, uid); return uid == pod.UID }
	h.d.cfg.Known = func() []runtime.PodRef { t.Error("the whole list read for one pod"); return nil }
	h.d.UpsertPod(pod)
	h.d.mu.Lock()
	w, pending := h.d.workers[pod.UID], len(h.d.pending)
	h.d.mu.Unlock()
	if w == nil || pending != 0 || len(asked) != 1 || asked[0] != pod.UID {
		t.Fatalf("a known pod: worker %v, %d pending, KnownPod asked of %v", w != nil, pending, asked)
	}

	other := named("other-uid", "other", time.Now(), withCPU("4"))
	if w := h.admitted(other); w == nil || !w.ended.Load() {
		t.Fatal("a pod unknown to the runtime and the disk was not judged (and refused)")
	}
}

func TestAdmissionWaitsForTheSource(t *testing.T) {
	pod := basePod(withCPU("1"))
	h := newHarness(t, pod)
	withAdmission(t, h, "1900m")
	var synced atomic.Bool
	h.d.listed = synced.Load
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.d.admitLoop(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	h.d.UpsertPod(pod)
	// The loop checks the source every sourceSyncPoll: give it several.
	time.Sleep(5 * sourceSyncPoll)
	h.d.mu.Lock()
	_, started := h.d.workers[pod.UID]
	h.d.mu.Unlock()
	if started {
		t.Fatal("a pod was judged before the source listed every pod")
	}
	synced.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.d.mu.Lock()
		w := h.d.workers[pod.UID]
		h.d.mu.Unlock()
		if w != nil {
			if w.ended.Load() {
				t.Error("the pod was rejected")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the pod was not admitted once the source listed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAdmissionFollowsCreationOrder(t *testing.T) {
	older := named("uid-1", "old", t0, withCPU("1"))
	younger := named("uid-2", "young", t0.Add(time.Second), withCPU("1"))
	h := newHarness(t, older)
	withAdmission(t, h, "1500m")
	// The younger pod arrives first; both wait for one admission round.
	h.d.UpsertPod(younger)
	h.d.UpsertPod(older)
	// A deleted pod, older still, is not judged and holds nobody up.
	gone := named("uid-0", "gone", t0.Add(-time.Second), withCPU("1"))
	now := metav1.Now()
	gone.DeletionTimestamp = &now
	h.d.UpsertPod(gone)
	h.d.admitPending(context.Background(), true)

	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	wo, wy, wg := h.d.workers[older.UID], h.d.workers[younger.UID], h.d.workers[gone.UID]
	if wo == nil || wo.ended.Load() {
		t.Fatal("the older pod was not admitted")
	}
	if wy == nil || !wy.ended.Load() || wy.state.end.reason != "OutOfcpu" {
		t.Fatal("the younger pod was not rejected for the older one's cpu")
	}
	if wg == nil || wg.state.end.rejected {
		t.Error("a deleted pod was judged instead of being handed to its worker to end")
	}
	if len(h.d.pending) != 0 {
		t.Errorf("%d pods still pending", len(h.d.pending))
	}
}

func TestStaticPodWaitsForItsPredecessorsName(t *testing.T) {
	static := func(p *v1.Pod) { p.Annotations = map[string]string{configSourceAnnotation: "file"} }
	old := named("uid-old", "web-n1", t0, static, withCPU("1"))
	h := newHarness(t, old)
	withAdmission(t, h, "1500m")
	ctx := context.Background()
	h.d.UpsertPod(old)
	h.d.admitPending(ctx, false) // static pods need not wait for the apiserver's list
	h.d.mu.Lock()
	_, started := h.d.workers[old.UID]
	h.d.mu.Unlock()
	if !started {
		t.Fatal("a static pod waited for the apiserver's pods to be listed")
	}

	// The file changed: the same name, another UID, while the old pod stops.
	changed := named("uid-new", "web-n1", t0.Add(time.Second), static, withCPU("1"))
	h.d.RemovePod(old)
	h.d.UpsertPod(changed)
	h.d.admitPending(ctx, true)
	if !h.d.Running(old.Namespace, old.Name) {
		t.Fatal("Running does not see the stopping pod")
	}
	h.d.mu.Lock()
	_, early := h.d.workers[changed.UID]
	h.d.mu.Unlock()
	if early {
		t.Fatal("the new static pod started while the old one of its name still stops")
	}

	h.d.mu.Lock()
	delete(h.d.workers, old.UID) // its worker is done
	h.d.mu.Unlock()
	h.d.admitPending(ctx, true)
	h.d.mu.Lock()
	w := h.d.workers[changed.UID]
	h.d.mu.Unlock()
	if w == nil || w.ended.Load() {
		t.Fatal("the new static pod was not admitted once the old one was gone")
	}

	// Pods of the apiserver still wait for the list.
	api := named("uid-api", "api", t0, withCPU("100m"))
	h.d.UpsertPod(api)
	h.d.admitPending(ctx, false)
	if h.d.Running(api.Namespace, api.Name) {
		t.Error("a pod of the apiserver was admitted before the list")
	}
}
