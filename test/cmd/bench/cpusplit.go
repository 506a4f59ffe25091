package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// The CPU split: what the machine spent its CPU on while a round's pods started, by
// component, to show what bounds the start on a small machine. Each component is a set of
// the harness's daemons (their pid files' names); what none of them spent (containerd's
// shims and runc, the CNI plugins, the bench itself, the kernel's work for nobody in
// particular) is compElse.

// Names of the split's components, in the order of the table.
const (
	compAgent       = "agent"
	compAPIServer   = "kube-apiserver"
	compEtcd        = "etcd"
	compControllers = "kube-controller-manager + kube-scheduler"
	compContainerd  = "containerd"
	compElse        = "everything else"
)

// cpuComponents are the components measured per process, with the harness daemons each
// is made of.
var cpuComponents = []struct {
	name    string
	daemons []string
}{
	{compAgent, []string{"agent"}},
	{compAPIServer, []string{"kube-apiserver"}},
	{compEtcd, []string{"etcd"}},
	{compControllers, []string{"kube-controller-manager", "kube-scheduler"}},
	{compContainerd, []string{"containerd"}},
}

// cpuSample is one reading of the machine's CPU counters.
type cpuSample struct {
	at time.Time
	// busy is the whole machine's busy CPU seconds since boot, over all cores.
	busy  float64
	cores int
	// procs is each daemon's CPU seconds by its pid file's name, from its threads'
	// schedstat (runSeconds: an agent starting ten pods runs for a dozen 10-ms ticks, too
	// few to count per pod in ticks); a daemon that could not be read is missing.
	procs map[string]float64
	// all is every process's CPU, for the breakdown of compElse (elsesplit.go).
	all map[procKey]procCPU
	// calls is containerd's count of CRI calls by method (runtimecalls.go), nil when the
	// runtime's metrics were not read.
	calls map[string]float64
}

// cpuSplit is the CPU the machine spent over a span, by component.
type cpuSplit struct {
	WallSeconds float64 `json:"wallSeconds"`
	Cores       int     `json:"cores"`
	// CapacitySeconds is cores × WallSeconds: all the CPU the machine had.
	CapacitySeconds float64 `json:"capacityCPUSeconds"`
	// BusySeconds is what the whole machine spent (/proc/stat: user, nice, system, irq,
	// softirq, steal).
	BusySeconds float64 `json:"machineBusyCPUSeconds"`
	// Components are the CPU seconds of each component found (a daemon without a live
	// pid file is left out), and compElse: BusySeconds less the others.
	Components map[string]float64 `json:"cpuSecondsByComponent"`
	// ElseByProcess is compElse by process (elsesplit.go).
	ElseByProcess map[string]float64 `json:"everythingElseByProcess,omitempty"`
	// RuntimeCalls are the CRI calls containerd handled over the span, by method
	// (runtimecalls.go).
	RuntimeCalls map[string]float64 `json:"criCallsByMethod,omitempty"`
}

// sampleCPU reads the machine's busy time and the CPU time of the components' daemons
// found in pids (the harness's live daemons by name, harness.Config.Pids); a daemon that
// is not there or cannot be read (gone) is left out.
func sampleCPU(pids map[string]int) (cpuSample, error) {
	s := cpuSample{at: time.Now(), procs: map[string]float64{}}
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	if s.busy, s.cores, err = parseProcStat(data); err != nil {
		return s, err
	}
	daemons := map[int]bool{}
	for _, c := range cpuComponents {
		for _, name := range c.daemons {
			pid, ok := pids[name]
			if !ok {
				continue
			}
			daemons[pid] = true
			if v, err := runSeconds(pid); err == nil {
				s.procs[name] = v
			}
		}
	}
	s.all = readProcs("/proc", daemons)
	return s, nil
}

// parseProcStat reads /proc/stat's busy CPU seconds over all cores (user, nice, system,
// irq, softirq and steal of the "cpu" line: guest time is inside user already, idle and
// iowait are not busy) and the number of cores (its "cpuN" lines).
func parseProcStat(data []byte) (busy float64, cores int, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	found := false
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		if fields[0] != "cpu" {
			cores++
			continue
		}
		if len(fields) < 9 {
			return 0, 0, fmt.Errorf("/proc/stat: short cpu line %q", sc.Text())
		}
		var ticks float64
		// user nice system idle iowait irq softirq steal: all but idle and iowait.
		for _, i := range []int{1, 2, 3, 6, 7, 8} {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return 0, 0, fmt.Errorf("/proc/stat: %w", err)
			}
			ticks += v
		}
		const clockTicks = 100 // USER_HZ on Linux
		busy, found = ticks/clockTicks, true
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !found || cores == 0 {
		return 0, 0, fmt.Errorf("/proc/stat: no cpu lines")
	}
	return busy, cores, nil
}

// splitCPU is the CPU spent between two samples, by component. A component counts when
// at least one of its daemons is in both samples; compElse is the machine's busy time less
// the components', never below zero (the counters tick apart, so a few ticks may be off).
func splitCPU(from, to cpuSample) *cpuSplit {
	wall := to.at.Sub(from.at).Seconds()
	s := &cpuSplit{
		WallSeconds: wall, Cores: to.cores, CapacitySeconds: float64(to.cores) * wall,
		BusySeconds: to.busy - from.busy, Components: map[string]float64{},
	}
	var sum float64
	for _, c := range cpuComponents {
		var v float64
		found := false
		for _, d := range c.daemons {
			a, okA := from.procs[d]
			b, okB := to.procs[d]
			if okA && okB {
				v, found = v+b-a, true
			}
		}
		if found {
			s.Components[c.name] = v
			sum += v
		}
	}
	s.Components[compElse] = max(s.BusySeconds-sum, 0)
	if from.all != nil && to.all != nil {
		s.ElseByProcess = splitElse(from.all, to.all, s.Components[compElse])
	}
	s.RuntimeCalls = callsBetween(from.calls, to.calls)
	return s
}

// cpuSpan starts a span of the CPU split with sample; end ends it and returns the split,
// nil when sample is nil or a reading failed (said on stderr: the round goes on).
func cpuSpan(sample func() (cpuSample, error)) (end func() *cpuSplit) {
	if sample == nil {
		return func() *cpuSplit { return nil }
	}
	from, err := sample()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: CPU split: %v\n", err)
		return func() *cpuSplit { return nil }
	}
	return func() *cpuSplit {
		to, err := sample()
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: CPU split: %v\n", err)
			return nil
		}
		return splitCPU(from, to)
	}
}

// cpuRowMachine and cpuRowCapacity are the CPU table's last rows.
const (
	cpuRowMachine  = "whole machine busy (all of the above)"
	cpuRowCapacity = "machine capacity (cores × span)"
)

// cpuCell is one side's figure on one row of the CPU table: medians over rounds.
type cpuCell struct {
	seconds, share float64
	ok             bool
}

// cpuRow is one row of the CPU table, by side.
type cpuRow struct {
	row   string
	cells map[string]cpuCell
}

// cpuRows are the rows of the CPU table for the sides named: the components in their
// order (those no side has left out), compElse, the machine's busy time and its capacity.
// Each cell is the median over the side's rounds that have the row of the CPU seconds, and
// of their share of the round's capacity.
func cpuRows(sides map[string]sideResult, names []string, of func(roundResult) *cpuSplit) []cpuRow {
	var rows []string
	for _, c := range cpuComponents {
		rows = append(rows, c.name)
	}
	rows = append(rows, compElse, cpuRowMachine, cpuRowCapacity)
	var out []cpuRow
	for _, row := range rows {
		r := cpuRow{row: row, cells: map[string]cpuCell{}}
		seen := false
		for _, name := range names {
			var secs, shares []float64
			for _, rr := range sides[name].Rounds {
				s := of(rr)
				if s == nil || s.CapacitySeconds <= 0 {
					continue
				}
				if v, ok := splitRow(s, row); ok {
					secs, shares = append(secs, v), append(shares, v/s.CapacitySeconds)
				}
			}
			var c cpuCell
			c.seconds, _, _, c.ok = summary(secs)
			c.share, _, _, _ = summary(shares)
			r.cells[name] = c
			seen = seen || c.ok
		}
		if seen {
			out = append(out, r)
		}
	}
	return out
}

// splitRow is a split's CPU seconds on a row of the CPU table; ok is false when it has
// none there.
func splitRow(s *cpuSplit, row string) (seconds float64, ok bool) {
	switch row {
	case cpuRowMachine:
		return s.BusySeconds, true
	case cpuRowCapacity:
		return s.CapacitySeconds, true
	}
	seconds, ok = s.Components[row]
	return seconds, ok
}

// cpuSides are the sides of the CPU table, in the main table's order: those with a split
// in any round.
func cpuSides(sides map[string]sideResult) []string {
	return sidesWith(sides, startSplit)
}

// startSplit and deleteSplit are a round's CPU splits of the start and of the deletion.
func startSplit(r roundResult) *cpuSplit  { return r.CPUStart }
func deleteSplit(r roundResult) *cpuSplit { return r.CPUDelete }

// sidesWith are the sides with the split in any round, in the main table's order.
func sidesWith(sides map[string]sideResult, of func(roundResult) *cpuSplit) []string {
	var out []string
	for _, name := range []string{"nodeagent", "kubelet", "floor"} {
		for _, r := range sides[name].Rounds {
			if of(r) != nil {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

// writeCPUTable prints the Markdown table of where the machine's CPU went while the pods
// started, by component and side, and how long the span was. Nothing when no round has a
// split.
func writeCPUTable(w io.Writer, sides map[string]sideResult) {
	writeSplitTable(w, sides, startSplit, "CPU while the pods start (first create → all N running; the floor: first CRI call → last container started), medians over rounds:")
}

// writeDeleteCPUTable is writeCPUTable for the deletion: from the delete request (the
// floor: its first stop) until nothing of the pods is left.
func writeDeleteCPUTable(w io.Writer, sides map[string]sideResult) {
	writeSplitTable(w, sides, deleteSplit, "CPU while the pods are deleted (delete request → nothing left; the floor: first CRI stop → last sandbox removed), medians over rounds:")
}

// writeSplitTable prints the table of one split (of) of the rounds under title.
func writeSplitTable(w io.Writer, sides map[string]sideResult, of func(roundResult) *cpuSplit, title string) {
	names := sidesWith(sides, of)
	rows := cpuRows(sides, names, of)
	if len(names) == 0 || len(rows) == 0 {
		return
	}
	fmt.Fprint(w, "\n"+title+"\n\n")
	head, rule := "| component", "|---"
	for _, name := range names {
		head += fmt.Sprintf(" | %s CPU s / share of machine capacity", name)
		rule += "|---"
	}
	fmt.Fprintln(w, head+" |")
	fmt.Fprintln(w, rule+"|")
	for _, r := range rows {
		label := r.row
		if r.row == compAgent {
			label = "agent (nodeagent or kubelet)"
		}
		line := "| " + label
		for _, name := range names {
			c := r.cells[name]
			if !c.ok {
				line += " | —"
				continue
			}
			line += fmt.Sprintf(" | %.3g / %.3g %%", c.seconds, 100*c.share)
		}
		fmt.Fprintln(w, line+" |")
	}
	fmt.Fprintln(w)
	for _, name := range names {
		var wall []float64
		cores := 0
		for _, r := range sides[name].Rounds {
			if s := of(r); s != nil {
				wall, cores = append(wall, s.WallSeconds), s.Cores
			}
		}
		med, _, _, _ := summary(wall)
		fmt.Fprintf(w, "%s: the span lasted %.3g s (median) on %d cores.\n", name, med, cores)
	}
}
