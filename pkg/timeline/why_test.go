package timeline

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func done(name string, from, to float64) Step {
	return Step{Name: name, Start: at(from), End: at(to), Outcome: Done}
}

func failed(name string, from, to float64, err string) Step {
	return Step{Name: name, Start: at(from), End: at(to), Outcome: Failed, Error: err}
}

func running(name string, from float64) Step {
	return Step{Name: name, Start: at(from), Outcome: InProgress}
}

// startOf is a pod's start up to its sandbox.
func startOf() []Step {
	return []Step{done("admit", 0, 0.001), done("podCgroup", 0.01, 0.02), done("volumes", 0.02, 0.1), done("sandbox", 0.1, 1)}
}

func TestExplain(t *testing.T) {
	const pullErr = `rpc error: code = NotFound desc = failed to pull and unpack image "registry.local/nope:1": not found`
	pending := &Status{Phase: v1.PodPending}
	for _, tc := range []struct {
		name    string
		steps   []Step
		status  *Status
		gone    time.Time
		now     float64
		want    Why
		summary string // a part of it
	}{
		{
			name:    "running and ready",
			steps:   append(startOf(), done("createContainer:app", 1, 1.1), done("startContainer:app", 1.1, 1.2), done(StepReady, 2, 2)),
			status:  &Status{Phase: v1.PodRunning, Ready: true},
			now:     10,
			want:    Why{Phase: v1.PodRunning, Ready: true, RunningAndReady: true, Step: StepReady, State: Done, Since: at(2), ForSeconds: 8},
			summary: "running and ready",
		},
		{
			name:    "pull in progress",
			steps:   append(startOf(), running("pullImage:app", 1)),
			status:  pending,
			now:     31,
			want:    Why{Phase: v1.PodPending, Step: "pullImage:app", State: InProgress, Since: at(1), ForSeconds: 30},
			summary: "on step pullImage:app for 30s",
		},
		{
			name: "pull failing: since the first failure in a row, the last error",
			steps: append(startOf(),
				failed("pullImage:app", 1, 2, "first"), done("podCgroup", 3, 3), failed("pullImage:app", 12, 13, pullErr), done("podCgroup", 14, 14)),
			status: &Status{Phase: v1.PodPending, Waiting: []Waiting{{Container: "app", Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}},
			now:    61,
			want: Why{Phase: v1.PodPending, Step: "pullImage:app", State: Failed, Since: at(1), ForSeconds: 60, Error: pullErr,
				Waiting: []Waiting{{Container: "app", Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}},
			summary: "step pullImage:app failing for 1m0s: " + pullErr + "; app: ImagePullBackOff",
		},
		{
			name:   "a failure since overcome is no answer",
			steps:  append(startOf(), failed("pullImage:app", 1, 2, "flake"), done("pullImage:app", 12, 13), done("createContainer:app", 13, 14)),
			status: pending,
			now:    20,
			want:   Why{Phase: v1.PodPending, Step: "createContainer:app", State: Done, Since: at(14), ForSeconds: 6},
		},
		{
			name:   "a retry in progress keeps the last error",
			steps:  append(startOf(), failed("pullImage:app", 1, 2, pullErr), running("pullImage:app", 12)),
			status: pending,
			now:    13,
			want:   Why{Phase: v1.PodPending, Step: "pullImage:app", State: InProgress, Since: at(12), ForSeconds: 1, Error: pullErr},
		},
		{
			name:    "running, not ready: waits after the last step, not after a re-ensured cgroup",
			steps:   append(startOf(), done("createContainer:app", 1, 1.1), done("startContainer:app", 1.1, 1.2), done("podCgroup", 9, 9), done("volumes", 9, 9)),
			status:  &Status{Phase: v1.PodRunning},
			now:     11.2,
			want:    Why{Phase: v1.PodRunning, Step: "startContainer:app", State: Done, Since: at(1.2), ForSeconds: 10},
			summary: "Running, not ready; waiting 10s after step startContainer:app",
		},
		{
			name:    "volumes failing",
			steps:   []Step{done("admit", 0, 0), done("podCgroup", 0, 0), failed("volumes", 0, 0.1, `configmap "cfg" not found`), done("podCgroup", 1, 1)},
			status:  pending,
			now:     5,
			want:    Why{Phase: v1.PodPending, Step: "volumes", State: Failed, Since: at(0), ForSeconds: 5, Error: `configmap "cfg" not found`},
			summary: `failing for 5s: configmap "cfg" not found`,
		},
		{
			name:    "rejected at admission",
			steps:   []Step{failed("admit", 0, 0.001, "OutOfcpu: Node didn't have enough resource: cpu")},
			now:     2,
			want:    Why{Step: "admit", State: Failed, Since: at(0), ForSeconds: 2, Error: "OutOfcpu: Node didn't have enough resource: cpu"},
			summary: "no status yet; step admit failing",
		},
		{
			name:    "nothing yet",
			now:     1,
			want:    Why{},
			summary: "no status yet",
		},
		{
			name:    "gone",
			steps:   append(startOf(), done("stopSandbox", 5, 6)),
			status:  &Status{Phase: v1.PodSucceeded},
			gone:    at(7),
			now:     8,
			want:    Why{Phase: v1.PodSucceeded, Step: "stopSandbox", State: Done, Since: at(6), ForSeconds: 2},
			summary: "the agent is done with the pod",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Explain(Timeline{Pod: web, Steps: tc.steps, Status: tc.status, Gone: tc.gone}, at(tc.now))
			if !strings.Contains(got.Summary, tc.summary) {
				t.Errorf("summary %q, want it to hold %q", got.Summary, tc.summary)
			}
			got.Summary = ""
			tc.want.Pod = web
			if !approx(got.ForSeconds, tc.want.ForSeconds) {
				t.Errorf("for %g s, want %g", got.ForSeconds, tc.want.ForSeconds)
			}
			got.ForSeconds = tc.want.ForSeconds
			if !equalWhy(got, tc.want) {
				t.Errorf("\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func equalWhy(a, b Why) bool {
	if len(a.Waiting) != len(b.Waiting) {
		return false
	}
	for i := range a.Waiting {
		if a.Waiting[i] != b.Waiting[i] {
			return false
		}
	}
	a.Waiting, b.Waiting = nil, nil
	return a.Pod == b.Pod && a.Phase == b.Phase && a.Ready == b.Ready && a.RunningAndReady == b.RunningAndReady &&
		a.Step == b.Step && a.State == b.State && a.Since.Equal(b.Since) && a.ForSeconds == b.ForSeconds && a.Error == b.Error
}
