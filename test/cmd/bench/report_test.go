package main

import (
	"strings"
	"testing"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

// floorPod is one floor pod's start as floorRound times it: its three CRI calls back to
// back from 0, the sandbox taking sandboxMs.
func floorPod(sandboxMs float64) podStart {
	return podStart{created: ms(0), started: ms(sandboxMs + 400), steps: []timeline.Step{
		done("sandbox", 0, sandboxMs), done("createContainer:sleep", sandboxMs, sandboxMs+150),
		done("startContainer:sleep", sandboxMs+150, sandboxMs+400),
	}}
}

// reportSides are two rounds of nodeagent (the second with a slower sandbox) and two of the
// floor, with the main table's creation → containers started as the watch saw it.
func reportSides() map[string]sideResult {
	slow := basePod()
	slow.started = ms(2300)
	slow.steps[3].End = ms(1670) // the sandbox
	for i := 4; i < len(slow.steps); i++ {
		slow.steps[i].Start, slow.steps[i].End = slow.steps[i].Start.Add(500e6), slow.steps[i].End.Add(500e6)
	}
	return map[string]sideResult{
		"nodeagent": {Available: true, Rounds: []roundResult{
			{Started: Dist{P50: 1.8, P99: 1.8}, Steps: breakdown([]podStart{basePod()})},
			{Started: Dist{P50: 2.3, P99: 2.3}, Steps: breakdown([]podStart{slow})},
		}},
		"kubelet": {Available: true, Rounds: []roundResult{{Started: Dist{P50: 2.5}}}},
		"floor": {Rounds: []roundResult{
			{Started: Dist{P50: 1.2}, Steps: breakdown([]podStart{floorPod(800)})},
			{Started: Dist{P50: 1.4}, Steps: breakdown([]podStart{floorPod(1000)})},
		}},
	}
}

func TestWriteStepTable(t *testing.T) {
	var b strings.Builder
	writeStepTable(&b, reportSides())
	t.Logf("\n%s", b.String())
	want := `
Where a pod's start goes (medians over rounds):

| step | nodeagent p50 / p99 (s) | floor p50 / p99 (s) | nodeagent / floor (p50) | share of the start (p50), nodeagent / floor |
|---|---|---|---|---|
| creation → admit (apiserver, scheduler, agent's watch) | 0.1 / 0.1 | — | — | 5.56 % / — |
| admit | 0.001 / 0.001 | — | — | 0.0556 % / — |
| podCgroup | 0.01 / 0.01 | — | — | 0.556 % / — |
| volumes | 0.05 / 0.05 | — | — | 2.78 % / — |
| sandbox | 1.5 / 1.5 | 1 / 1 | 1.50 | 65.2 % / 71.4 % |
| pullImage | 0 / 0 | — | — | 0 % / — |
| createContainer | 0.2 / 0.2 | 0.15 / 0.15 | 1.33 | 11.1 % / 12.5 % |
| startContainer | 0.3 / 0.3 | 0.25 / 0.25 | 1.20 | 16.7 % / 20.8 % |
| ready | 0 / 0 | — | — | 0 % / — |
| queue/wait (no step running) | 0.089 / 0.089 | — | — | 4.94 % / — |
| last step → started seen (status written, watched) | 0.05 / 0.05 | — | — | 2.78 % / — |
| the start: creation → containers started | 2.3 / 2.3 | 1.4 / 1.4 | 1.64 | 100 % / 100 % |

nodeagent: the rows' p50s add up to 2.3 s; the main table's creation → containers started p50: 2.3 s (1.00).
floor: the rows' p50s add up to 1.4 s; the main table's creation → containers started p50: 1.4 s (1.00).
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestWriteStepTableWithoutBreakdown(t *testing.T) {
	sides := reportSides()
	for _, name := range []string{"nodeagent", "floor"} {
		s := sides[name]
		for i := range s.Rounds {
			s.Rounds[i].Steps = nil
		}
		sides[name] = s
	}
	var b strings.Builder
	writeStepTable(&b, sides)
	if b.Len() != 0 {
		t.Errorf("no breakdown, yet a table:\n%s", b.String())
	}
}

// TestStepRowsOneSide: a floor-only run has the floor's rows, nodeagent's cells empty, and
// no nodeagent sum.
func TestStepRowsOneSide(t *testing.T) {
	sides := reportSides()
	delete(sides, "nodeagent")
	rows := stepRows(sides["nodeagent"], sides["floor"])
	var names []string
	for _, r := range rows {
		names = append(names, r.step)
		if r.na.ok {
			t.Errorf("%s: nodeagent cells %+v", r.step, r.na)
		}
	}
	if got, want := strings.Join(names, ","), "sandbox,createContainer,startContainer,"+rowWholeStart; got != want {
		t.Errorf("rows %s, want %s", got, want)
	}
	var b strings.Builder
	writeStepTable(&b, sides)
	if strings.Contains(b.String(), "nodeagent: the rows") || !strings.Contains(b.String(), "floor: the rows' p50s add up to 1.4 s") {
		t.Errorf("sums:\n%s", b.String())
	}
}
