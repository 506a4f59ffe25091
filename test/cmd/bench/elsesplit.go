package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// "Everything else" by process: what the CPU split's compElse was spent on, read from
// every process's /proc/<pid>/stat at both ends of the span. A process counts its own
// utime + stime, grouped by its command name, and the CPU of the exited children it has
// waited for (cutime + cstime: runc under the shims, the CNI plugins under containerd, the
// commands an agent runs) under "<name>: children". The components' daemons count only
// their children here (their own time is their row of the CPU table). What no process
// alive at the span's end accounts for (interrupts and softirqs, processes that exited
// without a live parent waiting for them) is elseUnattributed.

// Names of the rows that are not a process's command name.
const (
	elseKernelThreads = "kernel threads"
	elseUnattributed  = "not attributed (interrupts, processes gone without a waiting parent)"
	elseOthers        = "other processes"
	childrenSuffix    = ": children"
)

// procKey names a process across samples: a pid may be reused by a later process.
type procKey struct {
	pid   int
	start uint64
}

// procCPU is one process's CPU seconds as /proc/<pid>/stat gives it.
type procCPU struct {
	comm   string
	own    float64 // utime + stime
	waited float64 // cutime + cstime: its exited children it has waited for
	kernel bool
}

// readProcs reads every process's CPU from procRoot (/proc); a process that goes while it
// is read is left out. daemons are the components' pids: only their children count.
func readProcs(procRoot string, daemons map[int]bool) map[procKey]procCPU {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil
	}
	out := make(map[procKey]procCPU, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue
		}
		key, p, ok := parseProcStatLine(pid, string(data))
		if !ok {
			continue
		}
		if daemons[pid] {
			p.own = 0
		}
		out[key] = p
	}
	return out
}

// parseProcStatLine reads /proc/<pid>/stat: the command name between the parentheses
// (it may hold spaces and parentheses itself, so up to the last ')'), then ppid (a kernel
// thread's is 2, kthreadd's own pid), utime, stime, cutime, cstime and starttime.
func parseProcStatLine(pid int, s string) (procKey, procCPU, bool) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procKey{}, procCPU{}, false
	}
	f := strings.Fields(s[end+1:])
	// f[0] is the state: ppid is f[1], utime f[11] … cstime f[14], starttime f[19].
	if len(f) < 20 {
		return procKey{}, procCPU{}, false
	}
	num := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v }
	const clockTicks = 100 // USER_HZ on Linux
	start, _ := strconv.ParseUint(f[19], 10, 64)
	ppid, _ := strconv.Atoi(f[1])
	return procKey{pid, start}, procCPU{
		comm:   s[open+1 : end],
		own:    (num(11) + num(12)) / clockTicks,
		waited: (num(13) + num(14)) / clockTicks,
		kernel: pid == 2 || ppid == 2,
	}, true
}

// splitElse is what the processes spent between two readings, by row: each process of
// the second reading less what the same process had at the first (nothing when it is
// new). total is compElse: what it leaves is elseUnattributed.
func splitElse(from, to map[procKey]procCPU, total float64) map[string]float64 {
	out := map[string]float64{}
	var sum float64
	for k, b := range to {
		a := from[k]
		own, waited := b.own-a.own, b.waited-a.waited
		name := b.comm
		if b.kernel {
			name = elseKernelThreads
		}
		if own > 0 {
			out[name] += own
			sum += own
		}
		if waited > 0 {
			out[b.comm+childrenSuffix] += waited
			sum += waited
		}
	}
	out[elseUnattributed] = max(total-sum, 0)
	return out
}

// elseTableRows is how many process rows the table shows before elseOthers.
const elseTableRows = 10

// writeElseTable prints the Markdown table of compElse by process while the pods started,
// by side: medians over rounds; the rows are the processes largest on any side, the rest
// summed. Nothing when no round has the breakdown.
func writeElseTable(w io.Writer, sides map[string]sideResult) {
	var names []string
	med := map[string]map[string]float64{}
	for _, side := range cpuSides(sides) {
		byRow := map[string][]float64{}
		rounds := 0
		for _, r := range sides[side].Rounds {
			if r.CPUStart == nil || r.CPUStart.ElseByProcess == nil {
				continue
			}
			rounds++
			for row, v := range r.CPUStart.ElseByProcess {
				byRow[row] = append(byRow[row], v)
			}
		}
		if rounds == 0 {
			continue
		}
		names = append(names, side)
		med[side] = map[string]float64{}
		for row, vs := range byRow {
			for len(vs) < rounds { // a row missing from a round is zero there
				vs = append(vs, 0)
			}
			med[side][row], _, _, _ = summary(vs)
		}
	}
	if len(names) == 0 {
		return
	}
	rows := elseRows(med)
	fmt.Fprint(w, "\n\"Everything else\" while the pods start, by process (CPU s, medians over rounds; \"name: children\" is the exited children it waited for):\n\n")
	fmt.Fprintln(w, "| process | "+strings.Join(names, " | ")+" |")
	fmt.Fprintln(w, "|---"+strings.Repeat("|---", len(names))+"|")
	for _, row := range rows {
		line := "| " + row
		for _, side := range names {
			line += fmt.Sprintf(" | %.3g", med[side][row])
		}
		fmt.Fprintln(w, line+" |")
	}
}

// largestFirst lists m's keys by value, largest first, then by name.
func largestFirst(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// elseRows orders the table's rows: the elseTableRows processes largest on any side,
// largest first, then elseOthers (the rest summed into each side's med) and
// elseUnattributed.
func elseRows(med map[string]map[string]float64) []string {
	peak := map[string]float64{}
	for _, byRow := range med {
		for row, v := range byRow {
			if row != elseUnattributed {
				peak[row] = max(peak[row], v)
			}
		}
	}
	rows := largestFirst(peak)
	if len(rows) > elseTableRows {
		for _, byRow := range med {
			for _, row := range rows[elseTableRows:] {
				byRow[elseOthers] += byRow[row]
			}
		}
		rows = append(rows[:elseTableRows], elseOthers)
	}
	return append(rows, elseUnattributed)
}
