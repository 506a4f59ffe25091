package pleg

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

func TestRelistReportsChangesAndIgnoresForeignSandboxes(t *testing.T) {
	ctx := context.Background()
	rt := critesting.NewFakeRuntimeService()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var changed []string
	p, err := New(Config{Runtime: rt, Clock: clk, OnChange: func(ref runtime.PodRef) { changed = append(changed, string(ref.UID)) }})
	if err != nil {
		t.Fatal(err)
	}
	relist := func() []string {
		t.Helper()
		changed = nil
		clk.Step(time.Second)
		if err := p.Relist(ctx); err != nil {
			t.Fatal(err)
		}
		return changed
	}
	ours := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u1"},
		Labels: map[string]string{runtime.LabelPodUID: "u1", runtime.LabelPodName: "p", runtime.LabelPodNamespace: "ns"}}
	foreign := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "x", Namespace: "ns", Uid: "x1"}}
	if _, ok := p.Cache().RunningContainers(); ok {
		t.Fatal("running containers known before the first relist")
	}
	sb, _ := rt.RunPodSandbox(ctx, ours, "")
	_, _ = rt.RunPodSandbox(ctx, foreign, "")
	if got := relist(); len(got) != 1 || got[0] != "u1" {
		t.Fatalf("first relist reported %v, want [u1]", got)
	}
	if got := relist(); len(got) != 0 {
		t.Fatalf("unchanged relist reported %v", got)
	}
	cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
		Labels:      map[string]string{runtime.LabelPodUID: "u1", runtime.LabelContainer: "c"},
		Annotations: map[string]string{runtime.AnnotationRestartCount: "4"}}
	id, _ := rt.CreateContainer(ctx, sb, cfg, ours)
	_ = rt.StartContainer(ctx, id)
	if got := relist(); len(got) != 1 {
		t.Fatalf("new container reported %v, want [u1]", got)
	}
	st, stamp := p.Cache().Get("u1")
	if len(st.Containers) != 1 || st.Containers[0].State != runtime.ContainerRunning || st.Containers[0].RestartCount != 4 || !stamp.Equal(clk.Now()) {
		t.Fatalf("cache = %+v at %s", st.Containers, stamp)
	}
	if len(st.Sandboxes) != 1 || len(st.Sandboxes[0].IPs) == 0 {
		t.Errorf("sandbox IPs not read: %+v", st.Sandboxes)
	}
	if ids, ok := p.Cache().RunningContainers(); !ok || len(ids) != 1 || ids[0] != id {
		t.Errorf("RunningContainers() = %v, %v; want [%s]", ids, ok, id)
	}
	if pods, at := p.Cache().Pods(); len(pods) != 1 || pods[0] != st || !at.Equal(stamp) {
		t.Errorf("Pods() = %+v at %s, want the one pod Get returns, at %s", pods, at, stamp)
	}
	_ = rt.StopPodSandbox(ctx, sb)
	_ = rt.RemovePodSandbox(ctx, sb)
	_ = rt.RemoveContainer(ctx, id)
	if got := relist(); len(got) != 1 {
		t.Fatalf("removed pod reported %v, want [u1]", got)
	}
	if st, _ := p.Cache().Get("u1"); len(st.Sandboxes)+len(st.Containers) != 0 {
		t.Errorf("removed pod still cached: %+v", st)
	}
	if ids, ok := p.Cache().RunningContainers(); !ok || len(ids) != 0 {
		t.Errorf("RunningContainers() = %v, %v after the removal; want none, known", ids, ok)
	}
}

func TestGetNewerThanWaitsForAFreshRelist(t *testing.T) {
	rt := critesting.NewFakeRuntimeService()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p, _ := New(Config{Runtime: rt, Clock: clk})
	_ = p.Relist(context.Background())
	acted := clk.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Cache().GetNewerThan(ctx, "u1", acted); err == nil {
		t.Fatal("a relist from before the action was accepted")
	}
	clk.Step(time.Millisecond)
	_ = p.Relist(context.Background())
	if _, err := p.Cache().GetNewerThan(context.Background(), "u1", acted); err != nil {
		t.Fatal(err)
	}
}

func TestHealthyAfterARecentRelistOnly(t *testing.T) {
	rt := critesting.NewFakeRuntimeService()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	p, err := New(Config{Runtime: rt, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Healthy(); err == nil || err.Error() != "pleg has yet to be successful" {
		t.Errorf("before the first relist: %v", err)
	}
	if err := p.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Healthy(); err != nil {
		t.Errorf("right after a relist: %v", err)
	}
	clk.Step(3*time.Minute + time.Second)
	if err := p.Healthy(); err == nil || err.Error() != "pleg was last seen active 3m1s ago; threshold is 3m0s" {
		t.Errorf("3m1s after the last relist: %v", err)
	}
}

type fakeMetrics struct {
	durations, intervals []time.Duration
	running              int
	states               map[string]int
}

func (f *fakeMetrics) ObserveRelist(d, interval time.Duration, _ time.Time) {
	f.durations = append(f.durations, d)
	f.intervals = append(f.intervals, interval)
}

func (f *fakeMetrics) SetRuntimeCounts(running int, states map[string]int) {
	f.running, f.states = running, states
}

func TestRelistMetrics(t *testing.T) {
	ctx := context.Background()
	rt := critesting.NewFakeRuntimeService()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := &fakeMetrics{}
	p, err := New(Config{Runtime: rt, Clock: clk, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	sbCfg := func(uid string) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: uid, Namespace: "ns", Uid: uid},
			Labels: map[string]string{runtime.LabelPodUID: uid, runtime.LabelPodName: uid, runtime.LabelPodNamespace: "ns"}}
	}
	sb1, _ := rt.RunPodSandbox(ctx, sbCfg("u1"), "")
	sb2, _ := rt.RunPodSandbox(ctx, sbCfg("u2"), "")
	_ = rt.StopPodSandbox(ctx, sb2)
	for i, state := range []string{"run", "run", "exit", "create"} {
		cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: string(rune('a' + i))}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
			Labels: map[string]string{runtime.LabelPodUID: "u1", runtime.LabelContainer: string(rune('a' + i))}}
		id, _ := rt.CreateContainer(ctx, sb1, cfg, sbCfg("u1"))
		if state != "create" {
			_ = rt.StartContainer(ctx, id)
		}
		if state == "exit" {
			_ = rt.StopContainer(ctx, id, 0)
		}
	}
	if err := p.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if err := p.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if len(m.durations) != 2 || m.intervals[0] != 0 || m.intervals[1] != time.Second {
		t.Errorf("relists observed: durations %v intervals %v, want two, the second a second after the first", m.durations, m.intervals)
	}
	if m.running != 1 || m.states["running"] != 2 || m.states["exited"] != 1 || m.states["created"] != 1 {
		t.Errorf("counts: %d running pods, containers %v; want 1 pod (u2's sandbox is stopped), 2 running, 1 exited, 1 created", m.running, m.states)
	}
}
