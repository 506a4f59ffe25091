package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// statLine is a /proc/<pid>/stat line with the fields the breakdown reads.
func statLine(pid int, comm string, ppid, utime, stime, cutime, cstime int, start uint64) string {
	f := make([]string, 20)
	for i := range f {
		f[i] = "0"
	}
	f[0] = "S"
	f[1] = itoa(ppid)
	f[11], f[12], f[13], f[14] = itoa(utime), itoa(stime), itoa(cutime), itoa(cstime)
	f[19] = itoa(int(start))
	return itoa(pid) + " (" + comm + ") " + strings.Join(f, " ") + "\n"
}

func itoa(v int) string { return strconv.Itoa(v) }

func TestParseProcStatLine(t *testing.T) {
	// A command name with a space and a parenthesis: the name runs to the last ')'.
	key, p, ok := parseProcStatLine(42, statLine(42, "odd) name", 7, 150, 50, 30, 20, 999))
	if !ok {
		t.Fatal("not parsed")
	}
	if key != (procKey{42, 999}) || p.comm != "odd) name" || p.own != 2 || p.waited != 0.5 || p.kernel {
		t.Errorf("got %+v %+v", key, p)
	}
	if _, p, _ := parseProcStatLine(90, statLine(90, "kworker/1:2", 2, 10, 0, 0, 0, 5)); !p.kernel {
		t.Error("a child of kthreadd is a kernel thread")
	}
	if _, _, ok := parseProcStatLine(1, "1 (short) S 0 1"); ok {
		t.Error("a short line parsed")
	}
	if _, _, ok := parseProcStatLine(1, "no parentheses"); ok {
		t.Error("a line without a command name parsed")
	}
}

func TestSplitElse(t *testing.T) {
	from := map[procKey]procCPU{
		{10, 1}: {comm: "containerd-shim", own: 1, waited: 2},
		{11, 1}: {comm: "pause", own: 0.5},
		{12, 1}: {comm: "old", own: 9}, // gone by the end: its pid is reused below
		{20, 1}: {comm: "containerd", waited: 1},
	}
	to := map[procKey]procCPU{
		{10, 1}: {comm: "containerd-shim", own: 1.5, waited: 3},
		{11, 1}: {comm: "pause", own: 0.5},            // spent nothing: no row
		{12, 7}: {comm: "containerd-shim", own: 0.25}, // new, the pid reused: all of it counts
		{20, 1}: {comm: "containerd", waited: 1.5},    // a daemon: own is zero, its children count
		{30, 3}: {comm: "kworker/0:1", own: 0.1, kernel: true},
	}
	got := splitElse(from, to, 5)
	want := map[string]float64{
		"containerd-shim":                  0.75,
		"containerd-shim" + childrenSuffix: 1,
		"containerd" + childrenSuffix:      0.5,
		elseKernelThreads:                  0.1,
		elseUnattributed:                   5 - 2.35,
	}
	if len(got) != len(want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	for row, v := range want {
		if math.Abs(got[row]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", row, got[row], v)
		}
	}
	// The counters tick apart: what the processes spent may pass compElse by a little.
	if got := splitElse(from, to, 1); got[elseUnattributed] != 0 {
		t.Errorf("unattributed %v below zero or over", got[elseUnattributed])
	}
}

func TestReadProcsCountsOnlyADaemonsChildren(t *testing.T) {
	root := t.TempDir()
	write := func(pid int, line string) {
		dir := filepath.Join(root, itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(5, statLine(5, "containerd", 1, 500, 100, 40, 10, 3))
	write(6, statLine(6, "runc", 5, 20, 30, 0, 0, 8))
	if err := os.MkdirAll(filepath.Join(root, "self-not-a-pid"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := readProcs(root, map[int]bool{5: true})
	if len(got) != 2 {
		t.Fatalf("read %v", got)
	}
	if p := got[procKey{5, 3}]; p.own != 0 || p.waited != 0.5 {
		t.Errorf("daemon %+v: want no own time, its children's 0.5 s", p)
	}
	if p := got[procKey{6, 8}]; p.own != 0.5 {
		t.Errorf("runc %+v", p)
	}
}

func TestElseTable(t *testing.T) {
	round := func(byProc map[string]float64) roundResult {
		return roundResult{CPUStart: &cpuSplit{CapacitySeconds: 10, Components: map[string]float64{compElse: 1}, ElseByProcess: byProc}}
	}
	many := map[string]float64{elseUnattributed: 0.5}
	for i := range elseTableRows + 2 {
		many["p"+itoa(i+1)] = float64(i + 1)
	}
	sides := map[string]sideResult{
		"nodeagent": {Rounds: []roundResult{round(many)}},
		"floor":     {Rounds: []roundResult{round(map[string]float64{"p12": 20, elseUnattributed: 1})}},
	}
	var b bytes.Buffer
	writeElseTable(&b, sides)
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// Title, a blank line, header, rule, ten rows, others, unattributed.
	if len(lines) != 4+elseTableRows+2 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[4], "| p12 | 12 | 20 |") {
		t.Errorf("largest first, on any side: %q", lines[4])
	}
	// p1 and p2 are the smallest: summed into the others' row (3), zero on the floor.
	if lines[len(lines)-2] != "| "+elseOthers+" | 3 | 0 |" {
		t.Errorf("others: %q", lines[len(lines)-2])
	}
	if lines[len(lines)-1] != "| "+elseUnattributed+" | 0.5 | 1 |" {
		t.Errorf("unattributed: %q", lines[len(lines)-1])
	}
	var none bytes.Buffer
	writeElseTable(&none, map[string]sideResult{"kubelet": {Rounds: []roundResult{{}}}})
	if none.Len() != 0 {
		t.Errorf("a table without a breakdown: %q", none.String())
	}
}

func TestReadProcsOfThisMachine(t *testing.T) {
	self := false
	for k, p := range readProcs("/proc", nil) {
		if k.pid == os.Getpid() {
			self = p.comm != "" && k.start > 0
		}
	}
	if !self {
		t.Error("this test's own process not read from /proc")
	}
}
