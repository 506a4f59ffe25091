package sync

import (
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/status"
)

func TestDecide(t *testing.T) {
	deleted := func(in *input, _ *podState) {
		ts := metav1.NewTime(t0)
		in.pod.DeletionTimestamp = &ts
	}
	removed := func(in *input, _ *podState) { in.removed = true }
	inPhase := func(p phase) func(*input, *podState) {
		return func(_ *input, st *podState) { st.phase = p }
	}
	withFinal := func(_ *input, st *podState) { st.final = &v1.PodStatus{Phase: v1.PodSucceeded} }
	quiet := func(_ *input, st *podState) { st.end.quiet = true }
	released := func(_ *input, st *podState) { st.released = true }
	allRunning := func(in *input, _ *podState) { in.observed = obs(running("a"), running("b")) }
	aExited := func(in *input, _ *podState) { in.observed = obs(exited("a", 1), running("b")) }

	tests := []struct {
		name  string
		mut   []func(*input, *podState)
		want  stepKind
		check func(*testing.T, step)
	}{
		{name: "new pod: sandbox and containers", want: stepSync, check: func(t *testing.T, s step) {
			if !s.plan.CreateSandbox || len(s.plan.ContainersToStart) != 2 {
				t.Errorf("plan = %+v", s.plan)
			}
		}},
		{name: "running pod: nothing to do", mut: fns(allRunning), want: stepSync, check: func(t *testing.T, s step) {
			if len(s.plan.ContainersToStart)+len(s.holds) != 0 || s.wait != DefaultResyncPeriod {
				t.Errorf("step = %+v", s)
			}
		}},
		{name: "first restart is immediate and counted", mut: fns(aExited), want: stepSync, check: func(t *testing.T, s step) {
			if len(s.plan.ContainersToStart) != 1 || s.restarts.delay("uid-1/a") != backoffInitial {
				t.Errorf("plan = %+v restarts = %v", s.plan, s.restarts)
			}
		}},
		{name: "restart held by its back-off", mut: fns(aExited, func(in *input, st *podState) {
			st.restarts = backoffs{}.next("uid-1/a", t0, 0, false)
			in.now = t0.Add(4 * time.Second) // a finished at t0+1s: 7s left of 10s
		}), want: stepSync, check: func(t *testing.T, s step) {
			if len(s.plan.ContainersToStart) != 0 || len(s.holds) != 1 || s.holds[0].waiting.Reason != reasonCrashLoop || s.wait != 7*time.Second {
				t.Errorf("step = %+v", s)
			}
		}},
		{name: "pull back-off held for its image", mut: fns(func(in *input, st *podState) {
			st.pulls = backoffs{}.next(pullKey("busybox"), t0, 0, false)
			in.now = t0.Add(3 * time.Second)
		}), want: stepSync, check: func(t *testing.T, s step) {
			if s.pullsHeld["busybox"] != 7*time.Second {
				t.Errorf("pullsHeld = %v", s.pullsHeld)
			}
		}},
		{name: "deadline wakes the pod in time", mut: fns(allRunning, func(in *input, _ *podState) {
			d := int64(30)
			ts := metav1.NewTime(t0)
			in.pod.Spec.ActiveDeadlineSeconds, in.pod.Status.StartTime, in.now = &d, &ts, t0.Add(27*time.Second)
		}), want: stepSync, check: func(t *testing.T, s step) {
			if s.wait != 3*time.Second {
				t.Errorf("wait = %s, want 3s", s.wait)
			}
		}},
		{name: "past the deadline: stop with DeadlineExceeded", mut: fns(allRunning, func(in *input, _ *podState) {
			d := int64(30)
			ts := metav1.NewTime(t0)
			in.pod.Spec.ActiveDeadlineSeconds, in.pod.Status.StartTime, in.now = &d, &ts, t0.Add(30*time.Second)
		}), want: stepStop, check: func(t *testing.T, s step) {
			if s.begin == nil || s.begin.reason != reasonDeadlineExceeded || !s.begin.event {
				t.Errorf("begin = %+v", s.begin)
			}
		}},
		{name: "deleted: stop with the deletion's grace", mut: fns(allRunning, deleted, func(in *input, _ *podState) {
			g := int64(7)
			in.pod.DeletionGracePeriodSeconds = &g
		}), want: stepStop, check: func(t *testing.T, s step) {
			if s.grace != 7 || s.begin == nil || s.begin.quiet {
				t.Errorf("step = %+v", s)
			}
		}},
		{name: "force-deleted: a minimum grace", mut: fns(allRunning, deleted, func(in *input, _ *podState) {
			g := int64(0)
			in.pod.DeletionGracePeriodSeconds = &g
		}), want: stepStop, check: func(t *testing.T, s step) {
			if s.grace != minGracePeriod {
				t.Errorf("grace = %d", s.grace)
			}
		}},
		{name: "removed: stop quietly", mut: fns(allRunning, removed), want: stepStop, check: func(t *testing.T, s step) {
			if s.begin == nil || !s.begin.quiet {
				t.Errorf("begin = %+v", s.begin)
			}
		}},
		{name: "ended in the apiserver already: stop quietly", mut: fns(allRunning, func(in *input, _ *podState) {
			in.pod.Status.Phase = v1.PodSucceeded
		}), want: stepStop, check: func(t *testing.T, s step) {
			if s.begin == nil || !s.begin.quiet {
				t.Errorf("begin = %+v", s.begin)
			}
		}},
		{name: "terminating: stop again", mut: fns(inPhase(phaseTerminating)), want: stepStop},
		{name: "terminated: write the final status", mut: fns(inPhase(phaseTerminated)), want: stepFinal, check: func(t *testing.T, s step) {
			if !s.write {
				t.Error("the final status of a pod not deleted is kept, not written")
			}
		}},
		{name: "terminated quietly: no final status", mut: fns(inPhase(phaseTerminated), quiet), want: stepRelease},
		{name: "terminated and deleted: final status kept for the confirmation", mut: fns(inPhase(phaseTerminated), quiet, deleted), want: stepFinal, check: func(t *testing.T, s step) {
			if s.write {
				t.Error("the final status of a deleted pod is written before its cleanup")
			}
		}},
		{name: "terminated, final known, deleted: clean up", mut: fns(inPhase(phaseTerminated), withFinal, deleted), want: stepCleanup},
		{name: "terminated and removed: clean up", mut: fns(inPhase(phaseTerminated), removed), want: stepCleanup},
		{name: "terminated but something runs: wait", mut: fns(inPhase(phaseTerminated), withFinal, allRunning), want: stepIdle},
		{name: "terminated and released: idle", mut: fns(inPhase(phaseTerminated), withFinal, released), want: stepIdle},
		{name: "cleaned and deleted: confirm", mut: fns(inPhase(phaseCleaned), withFinal, deleted), want: stepConfirm},
		{name: "cleaned, confirmed: idle", mut: fns(inPhase(phaseCleaned), withFinal, deleted, func(_ *input, st *podState) {
			st.confirmed = true
		}), want: stepIdle},
		{name: "cleaned and removed: done", mut: fns(inPhase(phaseCleaned), removed), want: stepDone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := input{pod: basePod(), observed: obs(), now: t0, resync: DefaultResyncPeriod}
			in.observed.Sandboxes = nil // a new pod; mutators that add containers bring a sandbox
			st := podState{}
			for _, m := range tc.mut {
				m(&in, &st)
			}
			before := st
			s := decide(&st, in)
			if s.kind != tc.want {
				t.Fatalf("step = %s (%+v), want %s", s.kind, s, tc.want)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
			if st.phase != before.phase || st.final != before.final {
				t.Error("decide changed the state it was given")
			}
		})
	}
}

func fns(f ...func(*input, *podState)) []func(*input, *podState) { return f }

func TestAdvance(t *testing.T) {
	tests := []struct {
		name string
		st   podState
		s    step
		o    outcome
		want func(*testing.T, podState)
	}{
		{name: "a stop that begins the end, failed: terminating with the ending kept",
			s: step{kind: stepStop, begin: &ending{reason: reasonDeadlineExceeded}}, o: outcome{err: errors.New("x")},
			want: func(t *testing.T, st podState) {
				if st.phase != phaseTerminating || st.end.reason != reasonDeadlineExceeded {
					t.Errorf("state = %+v", st)
				}
			}},
		{name: "a stop done: terminated", st: podState{phase: phaseTerminating}, s: step{kind: stepStop},
			want: func(t *testing.T, st podState) {
				if st.phase != phaseTerminated {
					t.Errorf("phase = %s", st.phase)
				}
			}},
		{name: "a sync step: holds, waiting reasons and pulls recorded",
			st: podState{waiting: map[string]status.Waiting{"b": {Reason: reasonErrImagePull}}, pulls: backoffs{}.next(pullKey("y"), t0, 0, false)},
			s:  step{kind: stepSync, holds: []hold{{name: "a", waiting: status.Waiting{Reason: reasonCrashLoop}}}, restarts: backoffs{}.next("uid-1/a", t0, 0, false)},
			o:  outcome{waiting: map[string]*status.Waiting{"b": nil}, pullsFailed: []string{pullKey("x")}, pullsDone: []string{pullKey("y")}},
			want: func(t *testing.T, st podState) {
				if st.waiting["a"].Reason != reasonCrashLoop || len(st.waiting) != 1 {
					t.Errorf("waiting = %v", st.waiting)
				}
				if st.restarts.delay("uid-1/a") != backoffInitial {
					t.Errorf("restarts = %v", st.restarts)
				}
				if st.pulls.delay(pullKey("x")) != backoffInitial || st.pulls.delay(pullKey("y")) != 0 {
					t.Errorf("pulls = %v", st.pulls)
				}
			}},
		{name: "a failed cleanup is tried again", st: podState{phase: phaseTerminated}, s: step{kind: stepCleanup}, o: outcome{err: errors.New("busy")},
			want: func(t *testing.T, st podState) {
				if st.phase != phaseTerminated {
					t.Errorf("phase = %s", st.phase)
				}
			}},
		{name: "a final status kept, not written", st: podState{phase: phaseTerminated}, s: step{kind: stepFinal},
			o: outcome{final: &v1.PodStatus{Phase: v1.PodFailed}},
			want: func(t *testing.T, st podState) {
				if st.final == nil || st.finalWritten {
					t.Errorf("state = %+v", st)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			orig := tc.st
			origWaiting := len(tc.st.waiting)
			got := advance(tc.st, tc.s, tc.o, t0)
			tc.want(t, got)
			if len(orig.waiting) != origWaiting {
				t.Error("advance changed the waiting map of the state it was given")
			}
		})
	}
}
