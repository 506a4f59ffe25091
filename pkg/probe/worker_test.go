package probe

import (
	"context"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

func TestCounterObserve(t *testing.T) {
	tests := []struct {
		name     string
		success  int32
		failure  int32
		runs     []Result
		verdicts []Result
	}{
		{name: "defaults: one success is enough", runs: []Result{Success}, verdicts: []Result{Success}},
		{name: "defaults: three failures in a row", runs: []Result{Failure, Failure, Failure, Failure},
			verdicts: []Result{Unknown, Unknown, Failure, Failure}},
		{name: "a success resets the failure count", failure: 2, runs: []Result{Failure, Success, Failure, Failure},
			verdicts: []Result{Unknown, Success, Unknown, Failure}},
		{name: "success threshold", success: 3, failure: 1, runs: []Result{Success, Success, Failure, Success, Success, Success},
			verdicts: []Result{Unknown, Unknown, Failure, Unknown, Unknown, Success}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c counter
			p := &v1.Probe{SuccessThreshold: tt.success, FailureThreshold: tt.failure}
			for i, r := range tt.runs {
				if got := c.observe(r, p); got != tt.verdicts[i] {
					t.Errorf("run %d (%v): verdict %v, want %v", i, r, got, tt.verdicts[i])
				}
			}
		})
	}
}

// scripted replaces the manager's handler runs: each run reports itself on
// calls and takes its outcome from the test.
type scripted struct {
	calls chan Kind
	reply chan outcome
}

func (s *scripted) probe(kinds map[*v1.Probe]Kind) func(context.Context, Target, *v1.Probe) (outcome, string, error) {
	return func(ctx context.Context, _ Target, p *v1.Probe) (outcome, string, error) {
		s.calls <- kinds[p]
		select {
		case o := <-s.reply:
			return o, "scripted", nil
		case <-ctx.Done():
			return outcomeFailure, "", ctx.Err()
		}
	}
}

type probeHarness struct {
	t       *testing.T
	clock   *testclock.FakeClock
	m       *Manager
	s       *scripted
	changed chan types.UID
	events  *record.FakeRecorder
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newProbeHarness(t *testing.T, pod *v1.Pod) *probeHarness {
	t.Helper()
	h := &probeHarness{t: t, clock: testclock.NewFakeClock(t0), s: &scripted{calls: make(chan Kind), reply: make(chan outcome)},
		changed: make(chan types.UID, 100), events: record.NewFakeRecorder(100)}
	m, err := NewManager(Config{Exec: nopExec{}, Recorder: h.events, Clock: h.clock,
		OnChange: func(uid types.UID) { h.changed <- uid }})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[*v1.Probe]Kind{}
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for k, p := range map[Kind]*v1.Probe{Liveness: c.LivenessProbe, Readiness: c.ReadinessProbe, Startup: c.StartupProbe} {
			if p != nil {
				kinds[p] = k
			}
		}
	}
	// The probes in the pod spec are the ones workers are handed: the
	// map finds them by pointer.
	m.probe = h.s.probe(kinds)
	h.m = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

type nopExec struct{}

func (nopExec) ExecSync(context.Context, string, []string, time.Duration) ([]byte, []byte, error) {
	return nil, nil, nil
}

// expectRun waits for the next probe run, of kind, and answers it.
func (h *probeHarness) expectRun(kind Kind, o outcome) {
	h.t.Helper()
	select {
	case k := <-h.s.calls:
		if k != kind {
			h.t.Fatalf("probe %v ran, want %v", k, kind)
		}
		h.s.reply <- o
	case <-time.After(5 * time.Second):
		h.t.Fatalf("probe %v did not run", kind)
	}
}

// noRun checks that no probe is running now.
func (h *probeHarness) noRun() {
	h.t.Helper()
	select {
	case k := <-h.s.calls:
		h.t.Fatalf("probe %v ran, want none", k)
	default:
	}
}

// advance waits until n probe timers are pending, then moves the clock.
func (h *probeHarness) advance(n int, d time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.waiters() < n {
		if time.Now().After(deadline) {
			h.t.Fatalf("%d probe timers pending, want %d", h.waiters(), n)
		}
		goruntime.Gosched() // the workers are arming their timers
	}
	h.clock.Step(d)
}

func (h *probeHarness) waiters() int { return h.clock.Waiters() }

// waitChanged waits for the pod's worker to be told of a change.
func (h *probeHarness) waitChanged() {
	h.t.Helper()
	select {
	case <-h.changed:
	case <-time.After(5 * time.Second):
		h.t.Fatal("no change reported")
	}
}

func probedPod(c v1.Container) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{Containers: []v1.Container{c}}}
}

func runningObs(startedAt time.Time) *runtime.PodStatus {
	return &runtime.PodStatus{PodRef: runtime.PodRef{UID: "uid-1"},
		Sandboxes:  []*runtime.SandboxStatus{{ID: "sb", Ready: true, IPs: []string{"10.1.0.5"}}},
		Containers: []*runtime.ContainerStatus{{ID: "c1", SandboxID: "sb", Name: "app", State: runtime.ContainerRunning, StartedAt: startedAt}}}
}

func (h *probeHarness) events1() string {
	select {
	case e := <-h.events.Events:
		return e
	case <-time.After(5 * time.Second):
		h.t.Fatal("no event")
	}
	return ""
}

func TestReadinessFollowsProbe(t *testing.T) {
	pod := probedPod(v1.Container{Name: "app", ReadinessProbe: &v1.Probe{PeriodSeconds: 1, InitialDelaySeconds: 5, FailureThreshold: 1}})
	h := newProbeHarness(t, pod)
	h.m.UpdatePod(pod, runningObs(t0))
	if got := h.m.Results("c1").Readiness; got != Failure {
		t.Fatalf("initial readiness %v, want failure", got)
	}
	h.advance(1, 4*time.Second)
	h.noRun()
	h.advance(1, time.Second)
	h.expectRun(Readiness, outcomeSuccess)
	h.waitChanged()
	if got := h.m.Results("c1").Readiness; got != Success {
		t.Fatalf("readiness %v, want success", got)
	}
	h.advance(1, time.Second)
	h.expectRun(Readiness, outcomeFailure)
	h.waitChanged()
	if got := h.m.Results("c1").Readiness; got != Failure {
		t.Fatalf("readiness %v, want failure", got)
	}
	if e := h.events1(); !strings.Contains(e, "Warning Unhealthy Readiness probe failed: scripted") {
		t.Errorf("event %q", e)
	}
	// The container stops: its probe stops and its results go.
	h.m.UpdatePod(pod, &runtime.PodStatus{})
	if got := h.m.Results("c1"); got != (Results{}) {
		t.Errorf("results of a stopped container: %+v", got)
	}
}

func TestStartupGatesLiveness(t *testing.T) {
	pod := probedPod(v1.Container{Name: "app",
		StartupProbe:  &v1.Probe{PeriodSeconds: 2, FailureThreshold: 3},
		LivenessProbe: &v1.Probe{PeriodSeconds: 3, FailureThreshold: 2}})
	h := newProbeHarness(t, pod)
	h.m.UpdatePod(pod, runningObs(t0))
	if got := h.m.Results("c1"); got.Liveness != Success || got.Startup != Unknown {
		t.Fatalf("initial results %+v", got)
	}
	// Both timers fire at once; only the startup probe runs.
	h.advance(2, 0)
	h.expectRun(Startup, outcomeFailure)
	h.advance(2, 2*time.Second)
	h.expectRun(Startup, outcomeSuccess)
	h.waitChanged()
	// Its success runs liveness at once, and the startup probe is done.
	h.expectRun(Liveness, outcomeFailure)
	h.advance(1, 3*time.Second)
	h.expectRun(Liveness, outcomeFailure)
	h.waitChanged()
	if got := h.m.Results("c1"); got.Liveness != Failure || got.Startup != Success {
		t.Fatalf("results %+v, want liveness failure after startup success", got)
	}
	// On hold: no more runs until a new container replaces this one.
	h.clock.Step(10 * time.Second)
	h.noRun()
}
