package timeline

import (
	"errors"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var web = Pod{Namespace: "default", Name: "web", UID: "uid-1"}

type fakeObserver struct{ seen []string }

func (f *fakeObserver) ObservePodStep(kind string, d time.Duration) {
	f.seen = append(f.seen, fmt.Sprintf("%s %s", kind, d))
}

func newStore(t *testing.T, cfg Config) (*Store, *clocktesting.FakePassiveClock) {
	t.Helper()
	clk := clocktesting.NewFakePassiveClock(t0)
	cfg.Clock = clk
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

// step runs one timed step from at for d.
func step(s *Store, pod Pod, name string, at time.Time, d time.Duration, err error) {
	id := s.Begin(pod, name, at)
	s.End(pod.UID, id, at.Add(d), err)
}

func names(steps []Step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Name)
	}
	return out
}

func TestStoreRecordsSteps(t *testing.T) {
	obs := &fakeObserver{}
	s, clk := newStore(t, Config{Metrics: obs})
	s.Record(web, Step{Name: "admit", Start: t0, End: t0.Add(time.Millisecond)})
	step(s, web, "podCgroup", t0.Add(time.Millisecond), 2*time.Millisecond, nil)
	s.Record(web, Step{Name: "pullImage:app", Start: t0.Add(5 * time.Millisecond), Cached: true})
	step(s, web, "createContainer:app", t0.Add(6*time.Millisecond), 30*time.Millisecond, errors.New("rpc error: code = Unknown desc = boom"))
	id := s.Begin(web, "startContainer:app", t0.Add(40*time.Millisecond))
	clk.SetTime(t0.Add(100 * time.Millisecond))

	got, ok := s.Get("default", "web")
	if !ok {
		t.Fatal("no timeline")
	}
	want := []Step{
		{Name: "admit", Start: t0, End: t0.Add(time.Millisecond), DurationSeconds: 0.001, Outcome: Done},
		{Name: "podCgroup", Start: t0.Add(time.Millisecond), End: t0.Add(3 * time.Millisecond), DurationSeconds: 0.002, Outcome: Done},
		{Name: "pullImage:app", Start: t0.Add(5 * time.Millisecond), End: t0.Add(5 * time.Millisecond), Outcome: Done, Cached: true},
		{Name: "createContainer:app", Start: t0.Add(6 * time.Millisecond), End: t0.Add(36 * time.Millisecond), DurationSeconds: 0.03, Outcome: Failed, Error: "rpc error: code = Unknown desc = boom"},
		{Name: "startContainer:app", Start: t0.Add(40 * time.Millisecond), DurationSeconds: 0.06, Outcome: InProgress},
	}
	if len(got.Steps) != len(want) {
		t.Fatalf("steps %v, want %v", names(got.Steps), names(want))
	}
	for i := range want {
		g := got.Steps[i]
		g.id = 0
		if !approx(g.DurationSeconds, want[i].DurationSeconds) {
			t.Errorf("step %d: duration %g, want %g", i, g.DurationSeconds, want[i].DurationSeconds)
		}
		g.DurationSeconds = want[i].DurationSeconds
		if g != want[i] {
			t.Errorf("step %d:\n got %+v\nwant %+v", i, g, want[i])
		}
	}
	if got.Pod != web || !got.FirstSeen.Equal(t0) {
		t.Errorf("pod %+v first seen %v", got.Pod, got.FirstSeen)
	}
	s.End(web.UID, id, t0.Add(50*time.Millisecond), nil)
	wantObs := []string{"admit 1ms", "podCgroup 2ms", "createContainer 30ms", "startContainer 10ms"}
	if fmt.Sprint(obs.seen) != fmt.Sprint(wantObs) {
		t.Errorf("observed %v, want %v", obs.seen, wantObs)
	}
}

func approx(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestStoreFoldsRepeatedSuccesses(t *testing.T) {
	s, _ := newStore(t, Config{})
	step(s, web, "volumes", t0, time.Millisecond, nil)
	step(s, web, "sandbox", t0.Add(time.Second), time.Millisecond, nil)
	for i := range 5 {
		step(s, web, "volumes", t0.Add(time.Duration(i+2)*time.Minute), time.Millisecond, nil)
	}
	step(s, web, "pullImage:app", t0.Add(10*time.Minute), time.Second, errors.New("not found"))
	step(s, web, "pullImage:app", t0.Add(11*time.Minute), time.Second, errors.New("not found"))
	got, _ := s.Get("default", "web")
	if fmt.Sprint(names(got.Steps)) != "[volumes sandbox volumes pullImage:app pullImage:app]" {
		t.Fatalf("steps %v", names(got.Steps))
	}
	if v := got.Steps[2]; v.Repeats != 4 || !v.Start.Equal(t0.Add(6*time.Minute)) {
		t.Errorf("folded refreshes: %+v, want 4 repeats, the latest start", v)
	}
}

func TestStoreBoundsSteps(t *testing.T) {
	s, _ := newStore(t, Config{MaxSteps: 10})
	for i := range 25 {
		// Alternating failures never fold.
		step(s, web, fmt.Sprintf("s%d", i), t0.Add(time.Duration(i)*time.Second), time.Millisecond, errors.New("x"))
	}
	got, _ := s.Get("default", "web")
	want := "[s0 s1 s2 s3 s4 s20 s21 s22 s23 s24]"
	if fmt.Sprint(names(got.Steps)) != want || got.Dropped != 15 {
		t.Errorf("steps %v dropped %d, want the start and the latest: %s, 15 dropped", names(got.Steps), got.Dropped, want)
	}
}

func TestStoreReadyOnce(t *testing.T) {
	s, _ := newStore(t, Config{})
	ready := func(b bool) *v1.PodStatus {
		st := v1.ConditionFalse
		if b {
			st = v1.ConditionTrue
		}
		return &v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: st}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}}}}
	}
	s.ObserveStatus(web, ready(false), t0)
	s.ObserveStatus(web, ready(true), t0.Add(time.Second))
	s.ObserveStatus(web, ready(false), t0.Add(2*time.Second))
	s.ObserveStatus(web, ready(true), t0.Add(3*time.Second))
	got, _ := s.Get("default", "web")
	if fmt.Sprint(names(got.Steps)) != "[ready]" || !got.Steps[0].Start.Equal(t0.Add(time.Second)) {
		t.Errorf("steps %+v, want one ready at t0+1s", got.Steps)
	}
	if got.Status == nil || !got.Status.Ready || len(got.Status.Waiting) != 1 || got.Status.Waiting[0].Reason != "CrashLoopBackOff" {
		t.Errorf("status %+v", got.Status)
	}
}

func TestStoreForgets(t *testing.T) {
	s, clk := newStore(t, Config{Retention: time.Minute})
	old := Pod{Namespace: "default", Name: "web", UID: "uid-old"}
	step(s, old, "sandbox", t0, time.Second, nil)
	step(s, web, "sandbox", t0.Add(time.Second), time.Second, nil)
	s.Forget(old.UID, t0.Add(2*time.Second))

	// The pod the agent still has wins over the gone one of that name.
	if got, _ := s.Get("default", "web"); got.UID != web.UID {
		t.Errorf("got %s, want the live pod", got.UID)
	}
	s.Forget(web.UID, t0.Add(3*time.Second))
	if got, _ := s.Get("default", "web"); got.UID != web.UID || !got.Gone.Equal(t0.Add(3*time.Second)) {
		t.Errorf("got %s gone %v, want the one gone last", got.UID, got.Gone)
	}
	clk.SetTime(t0.Add(62 * time.Second))
	if got, _ := s.Get("default", "web"); got.UID != web.UID {
		t.Errorf("got %s, want the old one forgotten first", got.UID)
	}
	clk.SetTime(t0.Add(64 * time.Second))
	if _, ok := s.Get("default", "web"); ok {
		t.Error("pod kept past retention")
	}
	if len(s.pods) != 0 {
		t.Errorf("%d pods left", len(s.pods))
	}
}

func TestStoreBoundsPods(t *testing.T) {
	s, _ := newStore(t, Config{MaxPods: 3})
	pod := func(i int) Pod {
		return Pod{Namespace: "ns", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprint(i))}
	}
	for i := range 3 {
		step(s, pod(i), "sandbox", t0.Add(time.Duration(i)*time.Second), 0, nil)
	}
	s.Forget("1", t0.Add(5*time.Second))
	step(s, pod(3), "sandbox", t0.Add(6*time.Second), 0, nil) // p1 (gone) makes room
	step(s, pod(4), "sandbox", t0.Add(7*time.Second), 0, nil) // then p0, the least recently active
	for i, want := range []bool{false, false, true, true, true} {
		if _, ok := s.Get("ns", fmt.Sprintf("p%d", i)); ok != want {
			t.Errorf("p%d kept %v, want %v", i, ok, want)
		}
	}
}

func TestStoreEndOfUnknownStep(t *testing.T) {
	s, _ := newStore(t, Config{})
	s.End("nobody", 7, t0, nil) // no panic, nothing made
	if len(s.pods) != 0 {
		t.Errorf("%d pods", len(s.pods))
	}
}

// A running pod's passes ensure its cgroup and its volumes in turn: the pairs fold into
// one line each, after the steps of its start, and a failure between them stops the fold.
func TestStoreFoldsAPassOfSeveralSteps(t *testing.T) {
	s, _ := newStore(t, Config{})
	at := t0
	next := func() time.Time { at = at.Add(time.Second); return at }
	for _, n := range []string{"podCgroup", "volumes", "sandbox", "createContainer:app", "startContainer:app"} {
		step(s, web, n, next(), time.Millisecond, nil)
	}
	for range 50 {
		step(s, web, "podCgroup", next(), time.Millisecond, nil)
		step(s, web, "volumes", next(), time.Millisecond, nil)
	}
	got, _ := s.Get("default", "web")
	want := "[podCgroup volumes sandbox createContainer:app startContainer:app podCgroup volumes]"
	if fmt.Sprint(names(got.Steps)) != want {
		t.Fatalf("steps %v, want %s", names(got.Steps), want)
	}
	if c, v := got.Steps[5], got.Steps[6]; c.Repeats != 49 || v.Repeats != 49 || !v.Start.Equal(at) {
		t.Fatalf("folded passes: %+v %+v, want 49 repeats each, the latest start", c, v)
	}
	step(s, web, "pullImage:app", next(), time.Millisecond, errors.New("not found"))
	step(s, web, "podCgroup", next(), time.Millisecond, nil)
	got, _ = s.Get("default", "web")
	if n := names(got.Steps); len(n) != 9 || n[8] != "podCgroup" || got.Steps[8].Repeats != 0 {
		t.Fatalf("steps %v: a success after a failure folded over it", n)
	}
}
