package main

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// ms is t0 plus n milliseconds.
func ms(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }

func done(name string, from, to float64) timeline.Step {
	return timeline.Step{Name: name, Start: ms(from), End: ms(to), Outcome: timeline.Done}
}

// basePod is one bench pod's start as nodeagent's timeline shows it: created at 0, seen
// started at 1800 ms; 100 ms before admission, 9 + 30 + 50 ms between steps (the image
// present: its pull step takes no time), 50 ms from the status that showed it ready to the
// watch.
func basePod() podStart {
	return podStart{created: ms(0), started: ms(1800), steps: []timeline.Step{
		done("admit", 100, 101),
		done("podCgroup", 101, 111),
		done("volumes", 111, 161),
		done("sandbox", 170, 1170),
		{Name: "pullImage:sleep", Start: ms(1190), End: ms(1190), Outcome: timeline.Done, Cached: true},
		done("createContainer:sleep", 1200, 1400),
		done("startContainer:sleep", 1400, 1700),
		done("ready", 1750, 1750),
	}}
}

// row is the figures of one row of b, and whether it has it.
func row(b *startSteps, step string) (stepFigures, bool) {
	for _, f := range b.Steps {
		if f.Step == step {
			return f, true
		}
	}
	return stepFigures{}, false
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func steps(b *startSteps) []string {
	var out []string
	for _, f := range b.Steps {
		out = append(out, f.Step)
	}
	return out
}

func TestBreakdownOnePod(t *testing.T) {
	b := breakdown([]podStart{basePod()})
	want := []string{rowBeforeAdmit, "admit", "podCgroup", "volumes", "sandbox", "pullImage",
		"createContainer", "startContainer", "ready", rowQueueWait, rowStatusSeen}
	if got := steps(b); !reflect.DeepEqual(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if b.Pods != 1 || b.Missing != 0 || !near(b.Start.P50, 1.8) {
		t.Errorf("pods %d, missing %d, start %v; want 1, 0, 1.8 s", b.Pods, b.Missing, b.Start)
	}
	wantSeconds := map[string]float64{
		rowBeforeAdmit: 0.1, "admit": 0.001, "podCgroup": 0.01, "volumes": 0.05, "pullImage": 0,
		"sandbox": 1, "createContainer": 0.2, "startContainer": 0.3, "ready": 0,
		rowQueueWait: 0.089, rowStatusSeen: 0.05,
	}
	var sum, shares float64
	for _, f := range b.Steps {
		if !near(f.Seconds.P50, wantSeconds[f.Step]) || !near(f.Seconds.P99, wantSeconds[f.Step]) {
			t.Errorf("%s: %v, want %g s", f.Step, f.Seconds, wantSeconds[f.Step])
		}
		if !near(f.ShareP50, wantSeconds[f.Step]/1.8) {
			t.Errorf("%s: share %g, want %g", f.Step, f.ShareP50, wantSeconds[f.Step]/1.8)
		}
		sum += f.Seconds.P50
		shares += f.ShareP50
	}
	// One pod: its rows add up to its start, exactly.
	if !near(sum, 1.8) || !near(shares, 1) {
		t.Errorf("rows add up to %g s, %g of the start; want 1.8 s, all of it", sum, shares)
	}
}

func TestBreakdownPod(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *podStart)
		// want are the p50 seconds of the rows named; absent: the row must not be there.
		want    map[string]float64
		absent  []string
		failed  map[string]int
		start   float64
		missing int
	}{
		{
			name: "containers folded into their step kind",
			mutate: func(p *podStart) {
				p.steps = append(p.steps[:6:6], done("createContainer:sidecar", 1400, 1450),
					done("startContainer:sleep", 1450, 1600), done("startContainer:sidecar", 1600, 1700))
			},
			want:  map[string]float64{"createContainer": 0.25, "startContainer": 0.25, rowQueueWait: 0.039, rowStatusSeen: 0.1},
			start: 1.8,
		},
		{
			name: "overlapping steps cover their union once",
			mutate: func(p *podStart) {
				// Two pulls side by side, 161-661 and 400-900, then the sandbox.
				p.steps = append(p.steps[:3:3], done("pullImage:a", 161, 661), done("pullImage:b", 400, 900),
					done("sandbox", 900, 1170), done("createContainer:sleep", 1200, 1400), done("startContainer:sleep", 1400, 1700))
			},
			want:  map[string]float64{"pullImage": 1, rowQueueWait: 0.03, rowStatusSeen: 0.1},
			start: 1.8,
		},
		{
			name: "steps after the start are left out, a step past it is cut",
			mutate: func(p *podStart) {
				p.started = ms(1650)
				p.steps = append(p.steps, done("stopContainer:sleep", 2000, 3000))
			},
			want:   map[string]float64{"startContainer": 0.25, rowQueueWait: 0.039},
			absent: []string{"ready", "stopContainer", rowStatusSeen},
			start:  1.65,
		},
		{
			name: "a step in progress runs to the start's end",
			mutate: func(p *podStart) {
				p.steps[6].End, p.steps[6].Outcome = time.Time{}, timeline.InProgress
				p.steps = p.steps[:7]
			},
			want:   map[string]float64{"startContainer": 0.4, rowQueueWait: 0.039},
			absent: []string{rowStatusSeen},
			start:  1.8,
		},
		{
			name: "failed attempts count, their time too",
			mutate: func(p *podStart) {
				failed := done("sandbox", 170, 370)
				failed.Outcome, failed.Error = timeline.Failed, "boom"
				p.steps = append(p.steps[:3:3], failed, done("sandbox", 400, 1170), done("createContainer:sleep", 1200, 1400),
					done("startContainer:sleep", 1400, 1700))
			},
			want:   map[string]float64{"sandbox": 0.97, rowQueueWait: 0.069},
			failed: map[string]int{"sandbox": 1},
			start:  1.8,
		},
		{
			name: "no creation or start known: the timeline's own bounds",
			mutate: func(p *podStart) {
				p.created, p.started = time.Time{}, time.Time{}
			},
			want:   map[string]float64{"sandbox": 1, rowQueueWait: 0.039},
			absent: []string{rowBeforeAdmit, rowStatusSeen, "ready"},
			start:  1.6,
		},
		{
			name:    "no timeline",
			mutate:  func(p *podStart) { p.steps = nil },
			missing: 1,
		},
		{
			name: "no container started",
			mutate: func(p *podStart) {
				p.started = time.Time{}
				p.steps = p.steps[:5]
			},
			missing: 1,
		},
		{
			name:   "a step before the creation (clocks a little apart) starts at it",
			mutate: func(p *podStart) { p.created = ms(120) },
			want:   map[string]float64{"admit": 0, "podCgroup": 0, "volumes": 0.041},
			absent: []string{rowBeforeAdmit},
			start:  1.68,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := basePod()
			tt.mutate(&p)
			b := breakdown([]podStart{p})
			if b.Missing != tt.missing {
				t.Fatalf("missing %d, want %d", b.Missing, tt.missing)
			}
			if tt.missing > 0 {
				if b.Pods != 0 || len(b.Steps) != 0 {
					t.Errorf("a missing pod has rows: %+v", b)
				}
				return
			}
			if !near(b.Start.P50, tt.start) {
				t.Errorf("start %g s, want %g", b.Start.P50, tt.start)
			}
			for step, want := range tt.want {
				f, ok := row(b, step)
				if !ok || !near(f.Seconds.P50, want) {
					t.Errorf("%s: %v (there: %v), want %g s", step, f.Seconds, ok, want)
				}
			}
			for _, step := range tt.absent {
				if f, ok := row(b, step); ok {
					t.Errorf("%s is there: %+v", step, f)
				}
			}
			for _, f := range b.Steps {
				if f.Failed != tt.failed[f.Step] {
					t.Errorf("%s: %d failed, want %d", f.Step, f.Failed, tt.failed[f.Step])
				}
			}
		})
	}
}

// TestBreakdownPercentiles: 100 pods whose sandbox took 1..100 ms, and one with no
// timeline.
func TestBreakdownPercentiles(t *testing.T) {
	var pods []podStart
	for i := 1; i <= 100; i++ {
		d := float64(i)
		pods = append(pods, podStart{created: ms(0), started: ms(10 + d), steps: []timeline.Step{
			done("sandbox", 0, d), done("createContainer:c", d, d+5), done("startContainer:c", d+5, d+10),
		}})
	}
	pods = append(pods, podStart{})
	b := breakdown(pods)
	if b.Pods != 100 || b.Missing != 1 {
		t.Errorf("pods %d, missing %d; want 100, 1", b.Pods, b.Missing)
	}
	sb, _ := row(b, "sandbox")
	if sb.Pods != 100 || !near(sb.Seconds.P50, 0.05) || !near(sb.Seconds.P99, 0.099) || !near(sb.Seconds.Max, 0.1) {
		t.Errorf("sandbox %+v, want p50 50 ms, p99 99 ms, max 100 ms", sb)
	}
	// The 50th pod's sandbox: 50 ms of its 60.
	if !near(sb.ShareP50, 50.0/60) {
		t.Errorf("sandbox share %g, want %g", sb.ShareP50, 50.0/60)
	}
	// No time before, between or after the steps: no such rows.
	for _, r := range []string{rowBeforeAdmit, rowQueueWait, rowStatusSeen} {
		if _, ok := row(b, r); ok {
			t.Errorf("%s is there", r)
		}
	}
	if got, want := steps(b), []string{"sandbox", "createContainer", "startContainer"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
}

func TestUnion(t *testing.T) {
	iv := func(from, to float64) interval { return interval{ms(from), ms(to)} }
	tests := []struct {
		name     string
		ivs      []interval
		covered  time.Duration
		from, to float64
	}{
		{name: "one", ivs: []interval{iv(1, 3)}, covered: 2 * time.Millisecond, from: 1, to: 3},
		{name: "apart, out of order", ivs: []interval{iv(5, 6), iv(1, 3)}, covered: 3 * time.Millisecond, from: 1, to: 6},
		{name: "nested", ivs: []interval{iv(1, 10), iv(2, 3)}, covered: 9 * time.Millisecond, from: 1, to: 10},
		{name: "touching and overlapping", ivs: []interval{iv(1, 3), iv(3, 5), iv(4, 8)}, covered: 7 * time.Millisecond, from: 1, to: 8},
		{name: "empty ones", ivs: []interval{iv(1, 1), iv(2, 2)}, from: 1, to: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			covered, from, to := union(tt.ivs)
			if covered != tt.covered || !from.Equal(ms(tt.from)) || !to.Equal(ms(tt.to)) {
				t.Errorf("union = %v, %v, %v; want %v, %v, %v", covered, from, to, tt.covered, ms(tt.from), ms(tt.to))
			}
		})
	}
}
