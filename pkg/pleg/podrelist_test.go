package pleg

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// listCountingRuntime counts the lists of the whole runtime and those of one pod.
type listCountingRuntime struct {
	*critesting.FakeRuntimeService
	mu          sync.Mutex
	whole, pods int
}

func (r *listCountingRuntime) ListPodSandbox(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	r.mu.Lock()
	if f.GetLabelSelector()[runtime.LabelPodUID] != "" {
		r.pods++
	} else {
		r.whole++
	}
	r.mu.Unlock()
	return r.FakeRuntimeService.ListPodSandbox(ctx, f)
}

func (r *listCountingRuntime) counts() (whole, pods int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.whole, r.pods
}

func podSandboxConfig(uid string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p" + uid, Namespace: "ns", Uid: uid},
		Labels: map[string]string{runtime.LabelPodUID: uid, runtime.LabelPodName: "p" + uid, runtime.LabelPodNamespace: "ns"}}
}

// addContainer creates (and starts, when start) a container of the pod in sandbox sb.
func addContainer(t *testing.T, rt *critesting.FakeRuntimeService, sb, uid, name string, start bool) string {
	t.Helper()
	ctx := context.Background()
	cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
		Labels: map[string]string{runtime.LabelPodUID: uid, runtime.LabelContainer: name}}
	id, err := rt.CreateContainer(ctx, sb, cfg, podSandboxConfig(uid))
	if err != nil {
		t.Fatal(err)
	}
	if start {
		if err := rt.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

type podRelistFixture struct {
	rt      *listCountingRuntime
	clk     *clocktesting.FakeClock
	p       *PLEG
	changed []types.UID
	sb      map[string]string // sandbox by pod UID
}

// newPodRelistFixture is a PLEG over pods u0..u(n-1), each with a ready sandbox and one
// running container, after one relist of the whole runtime.
func newPodRelistFixture(t *testing.T, n int) *podRelistFixture {
	t.Helper()
	f := &podRelistFixture{rt: &listCountingRuntime{FakeRuntimeService: critesting.NewFakeRuntimeService()},
		clk: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), sb: map[string]string{}}
	var err error
	f.p, err = New(Config{Runtime: f.rt, Clock: f.clk, OnChange: func(ref runtime.PodRef) { f.changed = append(f.changed, ref.UID) }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		uid := fmt.Sprintf("u%d", i)
		sb, err := f.rt.RunPodSandbox(context.Background(), podSandboxConfig(uid), "")
		if err != nil {
			t.Fatal(err)
		}
		f.sb[uid] = sb
		addContainer(t, f.rt.FakeRuntimeService, sb, uid, "c", true)
	}
	if err := f.p.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.changed = nil
	return f
}

// step asks for what ask asks for, one clock step later, and relists what is pending.
func (f *podRelistFixture) step(t *testing.T, ask func()) {
	t.Helper()
	f.changed = nil
	f.clk.Step(time.Second)
	ask()
	if err := f.p.relistPending(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A worker's pod is relisted alone: its new container is cached and reported, with a stamp
// that satisfies the worker's wait, while another pod's change waits for its own relist.
func TestRelistPodReadsThatPodOnly(t *testing.T) {
	f := newPodRelistFixture(t, 8)
	before := f.clk.Now()
	newID := addContainer(t, f.rt.FakeRuntimeService, f.sb["u1"], "u1", "d", true)
	addContainer(t, f.rt.FakeRuntimeService, f.sb["u2"], "u2", "d", true)
	wholeBefore, _ := f.rt.counts()
	f.step(t, func() { f.p.RelistPod("u1") })
	if whole, pods := f.rt.counts(); whole != wholeBefore || pods != 1 {
		t.Errorf("lists: %d of the whole runtime, %d of a pod; want none of the whole, one of u1", whole-wholeBefore, pods)
	}
	if !slices.Equal(f.changed, []types.UID{"u1"}) {
		t.Errorf("changes reported %v, want [u1]", f.changed)
	}
	st, stamp := f.p.Cache().Get("u1")
	if len(st.Containers) != 2 || st.Containers[0].ID != newID || st.Name != "pu1" || !stamp.Equal(f.clk.Now()) {
		t.Errorf("u1 cached as %+v (%s) at %s", st.Containers, st.Name, stamp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := f.p.Cache().GetNewerThan(ctx, "u1", before); err != nil {
		t.Errorf("u1's relist did not satisfy its worker: %v", err)
	}
	if st, _ := f.p.Cache().Get("u2"); len(st.Containers) != 1 {
		t.Errorf("u2 changed without a relist of it: %+v", st.Containers)
	}
	if _, err := f.p.Cache().GetNewerThan(ctx, "u2", before); err == nil {
		t.Error("u1's relist satisfied a wait for u2")
	}
	if pods, _ := f.p.Cache().Pods(); len(pods) != 8 {
		t.Errorf("%d pods cached, want 8", len(pods))
	}
	// Nothing changed: nothing reported.
	f.step(t, func() { f.p.RelistPod("u1") })
	if len(f.changed) != 0 {
		t.Errorf("an unchanged pod reported: %v", f.changed)
	}
	// A relist of the whole runtime is newer than any pod's, and finds u2's container.
	f.clk.Step(time.Second)
	if err := f.p.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.changed, []types.UID{"u2"}) {
		t.Errorf("the whole relist reported %v, want [u2]", f.changed)
	}
	if _, stamp := f.p.Cache().Get("u1"); !stamp.Equal(f.clk.Now()) {
		t.Errorf("u1's stamp %s after the whole relist at %s", stamp, f.clk.Now())
	}
}

// A pod whose objects are all removed leaves the cache and the PLEG's records, and is
// reported once.
func TestRelistPodOfARemovedPod(t *testing.T) {
	f := newPodRelistFixture(t, 8)
	ctx := context.Background()
	st, _ := f.p.Cache().Get("u3")
	cid := st.Containers[0].ID
	if !f.p.Cache().Has("u3") {
		t.Fatal("the cache does not have a pod the runtime runs")
	}
	_ = f.rt.StopContainer(ctx, cid, 0)
	_ = f.rt.RemoveContainer(ctx, cid)
	_ = f.rt.StopPodSandbox(ctx, f.sb["u3"])
	_ = f.rt.RemovePodSandbox(ctx, f.sb["u3"])
	f.step(t, func() { f.p.RelistPod("u3") })
	if !slices.Equal(f.changed, []types.UID{"u3"}) {
		t.Errorf("changes reported %v, want [u3]", f.changed)
	}
	if st, _ := f.p.Cache().Get("u3"); len(st.Sandboxes)+len(st.Containers) != 0 {
		t.Errorf("removed pod still cached: %+v", st)
	}
	if _, ok := f.p.containers[cid]; ok {
		t.Error("the removed container is still recorded")
	}
	if _, ok := f.p.sandboxes[f.sb["u3"]]; ok {
		t.Error("the removed sandbox is still recorded")
	}
	if f.p.Cache().Has("u3") {
		t.Error("the cache has a removed pod")
	}
	if pods, _ := f.p.Cache().Pods(); len(pods) != 7 {
		t.Errorf("%d pods cached, want 7", len(pods))
	}
	f.step(t, func() { f.p.RelistPod("u3") })
	if len(f.changed) != 0 {
		t.Errorf("a pod already gone reported again: %v", f.changed)
	}
}

// An event that names no pod is relisted by the pod the PLEG knows its object by; an
// object it does not know takes a relist of the whole runtime, as does a burst of pods
// that is a large share of the node.
func TestEventsAndBurstsChooseTheRelist(t *testing.T) {
	f := newPodRelistFixture(t, 8)
	st, _ := f.p.Cache().Get("u4")
	cid := st.Containers[0].ID
	_ = f.rt.StopContainer(context.Background(), cid, 0)
	whole0, pods0 := f.rt.counts()
	f.step(t, func() { f.p.eventSeen("", cid) })
	if whole, pods := f.rt.counts(); whole != whole0 || pods != pods0+1 || !slices.Equal(f.changed, []types.UID{"u4"}) {
		t.Errorf("an event of u4's container: %d whole lists, %d pod lists, changes %v; want 0, 1, [u4]", whole-whole0, pods-pods0, f.changed)
	}
	if st, _ := f.p.Cache().Get("u4"); st.Containers[0].State != runtime.ContainerExited {
		t.Errorf("u4's container cached as %s, want exited", st.Containers[0].State)
	}
	whole0, pods0 = f.rt.counts()
	f.step(t, func() { f.p.eventSeen("", "never-seen") })
	if whole, pods := f.rt.counts(); whole != whole0+1 || pods != pods0 {
		t.Errorf("an event of an unknown object: %d whole lists, %d pod lists; want 1, 0", whole-whole0, pods-pods0)
	}
	whole0, pods0 = f.rt.counts()
	f.step(t, func() {
		for _, uid := range []types.UID{"u0", "u1", "u2"} {
			f.p.RelistPod(uid)
		}
	})
	if whole, pods := f.rt.counts(); whole != whole0+1 || pods != pods0 {
		t.Errorf("3 of 8 pods pending: %d whole lists, %d pod lists; want 1, 0", whole-whole0, pods-pods0)
	}
	// A relist of the whole runtime takes what was pending before it.
	f.p.RelistPod("u5")
	whole0, pods0 = f.rt.counts()
	if err := f.p.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := f.p.relistPending(context.Background()); err != nil {
		t.Fatal(err)
	}
	if whole, pods := f.rt.counts(); whole != whole0+1 || pods != pods0 {
		t.Errorf("a pod asked for before a whole relist was listed again: %d whole lists, %d pod lists", whole-whole0, pods-pods0)
	}
}

// In the Run loop a worker's RelistPod is answered at once, whatever the period.
func TestRunAnswersRelistPodAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := &listCountingRuntime{FakeRuntimeService: critesting.NewFakeRuntimeService()}
	sb, _ := rt.RunPodSandbox(ctx, podSandboxConfig("u1"), "")
	p, err := New(Config{Runtime: rt, RelistPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	eventually(t, time.Second, "the first relist", func() bool { w, _ := rt.counts(); return w == 1 })
	acted := time.Now()
	addContainer(t, rt.FakeRuntimeService, sb, "u1", "c", true)
	p.RelistPod("u1")
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	st, err := p.Cache().GetNewerThan(wctx, "u1", acted)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Containers) != 1 {
		t.Errorf("u1 after its relist: %+v", st.Containers)
	}
	if w, pods := rt.counts(); w != 1 || pods != 1 {
		t.Errorf("lists: %d whole, %d of a pod; want 1, 1", w, pods)
	}
}
