package timeline

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Why answers "why is this pod not running?" from its timeline.
type Why struct {
	Pod
	// Phase and Ready are as the last computed status says ("" and false
	// before the first).
	Phase v1.PodPhase `json:"phase,omitempty"`
	Ready bool        `json:"ready"`
	// RunningAndReady: nothing holds the pod back.
	RunningAndReady bool `json:"runningAndReady"`
	// Step is the step the pod is on: the last one started and not
	// finished, else the last failed one not since done, else the last
	// one done (what the pod waits after).
	Step  string  `json:"step,omitempty"`
	State Outcome `json:"state,omitempty"`
	// Since is when the pod came to be on Step: its start when in
	// progress, the first of its failures in a row when failed, its end
	// when done.
	Since      time.Time `json:"since,omitzero"`
	ForSeconds float64   `json:"forSeconds,omitempty"`
	// Error is the last error of a step not since done, as its
	// component gave it.
	Error string `json:"error,omitempty"`
	// Waiting are the containers' waiting reasons of the last status.
	Waiting []Waiting `json:"waiting,omitempty"`
	// Summary says all of it in one line.
	Summary string `json:"summary"`
}

// Explain answers why the pod of t is not running and ready, as of now.
func Explain(t Timeline, now time.Time) Why {
	w := Why{Pod: t.Pod}
	if t.Status != nil {
		w.Phase, w.Ready, w.Waiting = t.Status.Phase, t.Status.Ready, t.Status.Waiting
	}
	w.RunningAndReady = w.Phase == v1.PodRunning && w.Ready

	cur, since, errMsg := current(t.Steps)
	if cur != nil {
		w.Step, w.State, w.Since, w.Error = cur.Name, cur.Outcome, since, errMsg
		w.ForSeconds = max(now.Sub(since), 0).Seconds()
	}
	w.Summary = summary(w, t.Gone)
	return w
}

// current finds the step the pod is on, since when, and the last error
// not since overcome.
func current(steps []Step) (*Step, time.Time, string) {
	// An unresolved failure: failed, and no later success of that step.
	unresolved := -1
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Outcome == Failed && !doneAfter(steps, i) {
			unresolved = i
			break
		}
	}
	errMsg := ""
	if unresolved >= 0 {
		errMsg = steps[unresolved].Error
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Outcome == InProgress {
			return &steps[i], steps[i].Start, errMsg
		}
	}
	if unresolved >= 0 {
		since := steps[unresolved].Start
		for i := unresolved - 1; i >= 0; i-- {
			if steps[i].Name != steps[unresolved].Name {
				continue
			}
			if steps[i].Outcome != Failed {
				break
			}
			since = steps[i].Start
		}
		return &steps[unresolved], since, errMsg
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if !rerun(steps, i) || i == 0 {
			return &steps[i], steps[i].End, ""
		}
	}
	return nil, time.Time{}, ""
}

// ensureSteps run on every pass of a pod to keep what they made as it
// should be: only their first success is a step of the pod's way.
var ensureSteps = map[string]bool{"podCgroup": true, "volumes": true}

// rerun says whether the step at i is an ensure step done before.
func rerun(steps []Step, i int) bool {
	if !ensureSteps[steps[i].Kind()] {
		return false
	}
	if steps[i].Repeats > 0 {
		return true
	}
	for _, s := range steps[:i] {
		if s.Name == steps[i].Name && s.Outcome == Done {
			return true
		}
	}
	return false
}

// doneAfter says whether the step at i was done again later.
func doneAfter(steps []Step, i int) bool {
	for _, s := range steps[i+1:] {
		if s.Name == steps[i].Name && s.Outcome == Done {
			return true
		}
	}
	return false
}

func summary(w Why, gone time.Time) string {
	var b strings.Builder
	switch {
	case !gone.IsZero():
		fmt.Fprintf(&b, "the agent is done with the pod (since %s)", gone.UTC().Format(time.RFC3339))
	case w.RunningAndReady:
		b.WriteString("running and ready")
	case w.Phase == v1.PodSucceeded || w.Phase == v1.PodFailed:
		fmt.Fprintf(&b, "ended: %s", w.Phase)
	case w.Phase == "":
		b.WriteString("no status yet")
	default:
		fmt.Fprintf(&b, "%s, not ready", w.Phase)
	}
	if !w.RunningAndReady && gone.IsZero() {
		switch w.State {
		case InProgress:
			fmt.Fprintf(&b, "; on step %s for %s", w.Step, seconds(w.ForSeconds))
		case Failed:
			fmt.Fprintf(&b, "; step %s failing for %s", w.Step, seconds(w.ForSeconds))
		case Done:
			fmt.Fprintf(&b, "; waiting %s after step %s", seconds(w.ForSeconds), w.Step)
		}
		if w.Error != "" {
			fmt.Fprintf(&b, ": %s", w.Error)
		}
		for _, c := range w.Waiting {
			fmt.Fprintf(&b, "; %s: %s", c.Container, c.Reason)
		}
	}
	return b.String()
}

// seconds shows a duration in seconds rounded for people.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Minute:
		d = d.Round(time.Second)
	case d >= time.Second:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Millisecond)
	}
	return d.String()
}
