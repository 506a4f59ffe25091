package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Dist summarises a set of durations in seconds.
type Dist struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func dist(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	q := func(p float64) float64 { return s[int(math.Ceil(p*float64(len(s))))-1] }
	return Dist{P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: s[len(s)-1]}
}

// sideResult is everything measured of one side over all rounds.
type sideResult struct {
	Rounds  []roundResult `json:"rounds"`
	RSSIdle []float64     `json:"rssIdleMiB,omitempty"`
	RSSPods []float64     `json:"rssWithPodsMiB,omitempty"`
	// AnonPods is RssAnon with the pods: VmRSS less the pages of files (the binary's
	// text and data), what the agent's own data takes.
	AnonPods []float64 `json:"rssAnonWithPodsMiB,omitempty"`
	RSSAfter []float64 `json:"rssAfterDeleteMiB,omitempty"`
	HWM      []float64 `json:"hwmMiB,omitempty"`
	CPUPods  []float64 `json:"cpuSecondsWithPods,omitempty"`
	CPUIdle  []float64 `json:"cpuSecondsIdle,omitempty"`
	// CPUIdleBySecond is each second of each round's idle hold: the agent's CPU in ms.
	CPUIdleBySecond [][]float64 `json:"cpuMillisecondsIdleBySecond,omitempty"`
	Requests        []float64   `json:"apiserverRequests,omitempty"`
	// RequestsHeld are the node's requests over the hold with N pods running (they are
	// in Requests too), RequestsHeldBy their split by verb and resource.
	RequestsHeld   []float64        `json:"apiserverRequestsDuringHoldWithPods,omitempty"`
	RequestsHeldBy []map[string]int `json:"apiserverRequestsDuringHoldWithPodsByVerbResource,omitempty"`
	// RequestsPerMinPods and RequestsPerMinIdle are the node's requests per minute over the
	// hold with N pods running and over the idle hold before the pods.
	RequestsPerMinPods []float64 `json:"apiserverRequestsPerMinuteWithPods,omitempty"`
	RequestsPerMinIdle []float64 `json:"apiserverRequestsPerMinuteIdle,omitempty"`
	// RuntimeCallsHeld are the CRI calls per minute over the hold with N pods running, by
	// method (runtimecalls.go); a round whose runtime metrics could not be read has none.
	RuntimeCallsHeld []map[string]float64 `json:"criCallsPerMinuteDuringHoldWithPodsByMethod,omitempty"`
	// RequestsBy splits each round's requests by verb and resource.
	RequestsBy []map[string]int `json:"apiserverRequestsByVerbResource,omitempty"`
	Errors     []string         `json:"errors,omitempty"`
	Available  bool             `json:"available"`
}

// figure is one row of the table: how to read a number out of each round of a side.
type figure struct {
	name string
	get  func(s sideResult) []float64
}

func fromRounds(f func(r roundResult) float64) func(s sideResult) []float64 {
	return func(s sideResult) []float64 {
		var out []float64
		for _, r := range s.Rounds {
			out = append(out, f(r))
		}
		return out
	}
}

var baseFigures = []figure{
	{"creation → PodReadyToStartContainers p50 (s)", fromRounds(func(r roundResult) float64 { return r.SandboxReady.P50 })},
	{"creation → PodReadyToStartContainers p99 (s)", fromRounds(func(r roundResult) float64 { return r.SandboxReady.P99 })},
	{"creation → containers started p50 (s)", fromRounds(func(r roundResult) float64 { return r.Started.P50 })},
	{"creation → containers started p90 (s)", fromRounds(func(r roundResult) float64 { return r.Started.P90 })},
	{"creation → containers started p99 (s)", fromRounds(func(r roundResult) float64 { return r.Started.P99 })},
	{"creation → containers started max (s)", fromRounds(func(r roundResult) float64 { return r.Started.Max })},
	{"creation → Ready p50 (s)", fromRounds(func(r roundResult) float64 { return r.Ready.P50 })},
	{"creation → Ready p99 (s)", fromRounds(func(r roundResult) float64 { return r.Ready.P99 })},
	{"all N running (s)", fromRounds(func(r roundResult) float64 { return r.AllRunning })},
	{"delete all → nothing left (s)", fromRounds(func(r roundResult) float64 { return r.Deleted })},
	{"VmRSS idle (MiB)", func(s sideResult) []float64 { return s.RSSIdle }},
	{"VmRSS with N pods (MiB)", func(s sideResult) []float64 { return s.RSSPods }},
	{"RssAnon with N pods (MiB; VmRSS less the binary's file pages)", func(s sideResult) []float64 { return s.AnonPods }},
	{"VmRSS after delete (MiB)", func(s sideResult) []float64 { return s.RSSAfter }},
	{"VmHWM (MiB)", func(s sideResult) []float64 { return s.HWM }},
	{"CPU s over the hold, N pods running", func(s sideResult) []float64 { return s.CPUPods }},
	{"CPU s over the hold, idle", func(s sideResult) []float64 { return s.CPUIdle }},
	{"apiserver requests per round", func(s sideResult) []float64 { return s.Requests }},
	{"apiserver requests per minute, N pods idle", func(s sideResult) []float64 { return s.RequestsPerMinPods }},
	{"apiserver requests per minute, no pods idle", func(s sideResult) []float64 { return s.RequestsPerMinIdle }},
}

// pvcFigures are the -pvc variant's rows, after the base ones.
var pvcFigures = []figure{
	{"creation → scheduled (claim provisioned and bound) p50 (s)", fromRounds(func(r roundResult) float64 { return distOf(r.Scheduled).P50 })},
	{"creation → scheduled (claim provisioned and bound) p99 (s)", fromRounds(func(r roundResult) float64 { return distOf(r.Scheduled).P99 })},
	{"creation → volume attached p50 (s)", fromRounds(func(r roundResult) float64 { return distOf(r.Attached).P50 })},
	{"creation → volume attached p99 (s)", fromRounds(func(r roundResult) float64 { return distOf(r.Attached).P99 })},
	{"volume attached → containers started p50 (s)", fromRounds(func(r roundResult) float64 { return distOf(r.AttachedToStarted).P50 })},
	{"volume attached → containers started p99 (s)", fromRounds(func(r roundResult) float64 { return distOf(r.AttachedToStarted).P99 })},
	{"delete all → claims, PVs and VolumeAttachments gone (s)", fromRounds(func(r roundResult) float64 { return r.VolumesGone })},
}

// figuresFor returns the rows of the table; with -pvc "nothing left" includes the CSI mounts.
func figuresFor(pvc bool) []figure {
	if !pvc {
		return baseFigures
	}
	out := append([]figure(nil), baseFigures...)
	for i := range out {
		if out[i].name == "delete all → nothing left (s)" {
			out[i].name = "delete all → pods, sandboxes and CSI mounts gone (s)"
		}
	}
	return append(out, pvcFigures...)
}

func distOf(d *Dist) Dist {
	if d == nil {
		return Dist{}
	}
	return *d
}

// median, min and max of xs; ok is false when xs is empty.
func summary(xs []float64) (med, lo, hi float64, ok bool) {
	if len(xs) == 0 {
		return 0, 0, 0, false
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2], s[0], s[len(s)-1], true
}

func cellOf(xs []float64) string {
	med, lo, hi, ok := summary(xs)
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.3g [%.3g–%.3g]", med, lo, hi)
}

func ratio(a, b []float64) string {
	ma, _, _, okA := summary(a)
	mb, _, _, okB := summary(b)
	if !okA || !okB || mb == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", ma/mb)
}

// writeTable prints the Markdown table: medians with [min–max] over rounds, and ratios; the
// floor's columns only when the floor was measured.
func writeTable(w io.Writer, figs []figure, sides map[string]sideResult) {
	na, kl, fl := sides["nodeagent"], sides["kubelet"], sides["floor"]
	_, withFloor := sides["floor"]
	if withFloor {
		fmt.Fprintln(w, "| figure | nodeagent | kubelet | floor (CRI only) | nodeagent / kubelet | nodeagent / floor | kubelet / floor |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	} else {
		fmt.Fprintln(w, "| figure | nodeagent | kubelet | nodeagent / kubelet |")
		fmt.Fprintln(w, "|---|---|---|---|")
	}
	for _, f := range figs {
		if withFloor {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", f.name,
				cellOf(f.get(na)), cellOf(f.get(kl)), cellOf(f.get(fl)),
				ratio(f.get(na), f.get(kl)), ratio(f.get(na), f.get(fl)), ratio(f.get(kl), f.get(fl)))
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", f.name, cellOf(f.get(na)), cellOf(f.get(kl)), ratio(f.get(na), f.get(kl)))
	}
	for name, s := range sides {
		if len(s.Errors) > 0 {
			fmt.Fprintf(w, "\n%s errors: %s\n", name, strings.Join(s.Errors, "; "))
		}
	}
}

// rowLabels name the breakdown's rows that are no step in the "where a pod's start goes"
// table.
var rowLabels = map[string]string{
	rowBeforeAdmit: "creation → admit (apiserver, scheduler, agent's watch)",
	rowQueueWait:   "queue/wait (no step running)",
	rowStatusSeen:  "last step → started seen (status written, watched)",
}

// rowWholeStart is the table's last row: the start the rows divide.
const rowWholeStart = "the start: creation → containers started"

// stepCells are one side's figures on one row of the breakdown table: medians over rounds.
type stepCells struct {
	p50, p99, share float64
	ok              bool
}

// stepRow is one row of the breakdown table.
type stepRow struct {
	step   string
	na, fl stepCells
}

// stepRows are the rows of the breakdown table of nodeagent and the floor: each row's
// figures are the medians over the rounds that have it, as in the main table. The rows are
// in the order of the rounds' breakdowns, nodeagent's first, rowWholeStart last.
func stepRows(na, fl sideResult) []stepRow {
	var order []string
	seen := map[string]bool{}
	for _, s := range []sideResult{na, fl} {
		for _, r := range s.Rounds {
			if r.Steps == nil {
				continue
			}
			for _, f := range r.Steps.Steps {
				if !seen[f.Step] {
					seen[f.Step] = true
					order = append(order, f.Step)
				}
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return rowRank(order[i]) < rowRank(order[j]) })
	var rows []stepRow
	for _, step := range order {
		rows = append(rows, stepRow{step: step, na: stepCellsOf(na, step), fl: stepCellsOf(fl, step)})
	}
	if len(rows) > 0 {
		rows = append(rows, stepRow{step: rowWholeStart, na: stepCellsOf(na, rowWholeStart), fl: stepCellsOf(fl, rowWholeStart)})
	}
	return rows
}

// stepCellsOf is the medians over s's rounds of the row's figures.
func stepCellsOf(s sideResult, step string) stepCells {
	var p50, p99, share []float64
	for _, r := range s.Rounds {
		if r.Steps == nil || r.Steps.Pods == 0 {
			continue
		}
		if step == rowWholeStart {
			p50, p99, share = append(p50, r.Steps.Start.P50), append(p99, r.Steps.Start.P99), append(share, 1)
			continue
		}
		for _, f := range r.Steps.Steps {
			if f.Step == step {
				p50, p99, share = append(p50, f.Seconds.P50), append(p99, f.Seconds.P99), append(share, f.ShareP50)
			}
		}
	}
	var c stepCells
	c.p50, _, _, c.ok = summary(p50)
	c.p99, _, _, _ = summary(p99)
	c.share, _, _, _ = summary(share)
	return c
}

// stepSum is the sum of the rows' p50s (rowWholeStart aside) of one side; ok is false when
// the side has none.
func stepSum(rows []stepRow, side func(stepRow) stepCells) (sum float64, ok bool) {
	for _, r := range rows {
		if c := side(r); c.ok && r.step != rowWholeStart {
			sum, ok = sum+c.p50, true
		}
	}
	return sum, ok
}

// writeStepTable prints the Markdown table "where a pod's start goes", nodeagent beside the
// floor, and how the sum of each side's step p50s compares with its creation → containers
// started p50 as the watch measured it (the main table's). Nothing when no round has a
// breakdown.
func writeStepTable(w io.Writer, sides map[string]sideResult) {
	na, fl := sides["nodeagent"], sides["floor"]
	rows := stepRows(na, fl)
	if len(rows) == 0 {
		return
	}
	fmt.Fprint(w, "\nWhere a pod's start goes (medians over rounds):\n\n")
	fmt.Fprintln(w, "| step | nodeagent p50 / p99 (s) | floor p50 / p99 (s) | nodeagent / floor (p50) | share of the start (p50), nodeagent / floor |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		label := r.step
		if l, ok := rowLabels[r.step]; ok {
			label = l
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s / %s |\n", label, durations(r.na), durations(r.fl),
			cellRatio(r.na, r.fl), share(r.na), share(r.fl))
	}
	fmt.Fprintln(w)
	for _, s := range []struct {
		name string
		res  sideResult
		side func(stepRow) stepCells
	}{
		{"nodeagent", na, func(r stepRow) stepCells { return r.na }},
		{"floor", fl, func(r stepRow) stepCells { return r.fl }},
	} {
		sum, ok := stepSum(rows, s.side)
		measured, _, _, okM := summary(fromRounds(func(r roundResult) float64 { return r.Started.P50 })(s.res))
		if !ok || !okM {
			continue
		}
		fmt.Fprintf(w, "%s: the rows' p50s add up to %.3g s; the main table's creation → containers started p50: %.3g s (%s).\n",
			s.name, sum, measured, cellRatio(stepCells{p50: sum, ok: true}, stepCells{p50: measured, ok: true}))
	}
}

func durations(c stepCells) string {
	if !c.ok {
		return "—"
	}
	return fmt.Sprintf("%.3g / %.3g", c.p50, c.p99)
}

func share(c stepCells) string {
	if !c.ok {
		return "—"
	}
	return fmt.Sprintf("%.3g %%", 100*c.share)
}

func cellRatio(a, b stepCells) string {
	if !a.ok || !b.ok || b.p50 == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a.p50/b.p50)
}
