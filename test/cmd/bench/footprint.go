package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// memory returns VmRSS, VmHWM and RssAnon of pid in MiB.
func memory(pid int) (rss, hwm, anon float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		case "RssAnon:":
			anon = kb / 1024
		}
	}
	return rss, hwm, anon, sc.Err()
}

// cpuSeconds returns utime + stime of pid.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	_, p, ok := parseProcStatLine(pid, string(data))
	if !ok {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return p.own, nil
}

// runSeconds is the time pid's threads have run: each live thread's schedstat (in
// nanoseconds), where utime + stime count 10-ms clock ticks (over a 20-s hold an idle
// agent runs for a few ticks, and one tick more or less moved the idle ratio by a third),
// and, in ticks, the time of its threads that have ended: the process's utime + stime
// keep theirs, less what its live threads' own stat files count. Without the ended
// threads a process whose threads come and go lost their time between two readings:
// containerd's CPU over a start of ten pods read as -1.2 s. Without schedstat (a kernel
// without CONFIG_SCHEDSTATS) it is cpuSeconds.
func runSeconds(pid int) (float64, error) {
	all, err := cpuSeconds(pid)
	if err != nil {
		return 0, err
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var ns int64
	var liveTicks float64
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s", pid, t.Name())
		data, err := os.ReadFile(dir + "/schedstat")
		if os.IsNotExist(err) {
			if _, serr := os.Stat(dir); serr == nil {
				return cpuSeconds(pid) // no schedstat here
			}
			continue // the thread ended: its time is in the process's
		}
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			return 0, fmt.Errorf("empty %s/schedstat", dir)
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/schedstat: %w", dir, err)
		}
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue // ended between the two reads: its time is in the process's
		}
		_, own, ok := parseProcStatLine(pid, string(stat))
		if !ok {
			return 0, fmt.Errorf("short %s/stat", dir)
		}
		ns += v
		liveTicks += own.own
	}
	return withEnded(float64(ns)/1e9, all, liveTicks), nil
}

// withEnded adds to the live threads' run time the ended threads' share of the
// process's utime + stime (all): what is left of it once the live threads' own ticks
// are taken out, never below nothing (the counters are read one after the other).
func withEnded(live, all, liveTicks float64) float64 {
	if ended := all - liveTicks; ended > 0 {
		return live + ended
	}
	return live
}

// auditMark is a position in the apiserver's audit log.
type auditMark int64

func markAudit(path string) auditMark {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return auditMark(st.Size())
}

// countRequests counts the requests the node made between two marks of the audit log, in
// all and by verb and resource ("get volumeattachments"; a subresource after a slash).
func countRequests(path string, from, to auditMark) (int, map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	if _, err := f.Seek(int64(from), 0); err != nil {
		return 0, nil, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	read, n := int64(from), 0
	by := map[string]int{}
	for sc.Scan() && read < int64(to) {
		line := sc.Bytes()
		read += int64(len(line)) + 1
		var ev struct {
			Stage string `json:"stage"`
			Verb  string `json:"verb"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
		}
		if json.Unmarshal(line, &ev) == nil && ev.Stage == "ResponseComplete" && strings.HasPrefix(ev.User.Username, "system:node:") {
			n++
			key := ev.Verb + " " + ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				key += "/" + ev.ObjectRef.Subresource
			}
			by[key]++
		}
	}
	return n, by, sc.Err()
}

// heldRequests are the node's requests to the apiserver over a hold.
type heldRequests struct {
	n int
	// by splits them by verb and resource, as countRequests does.
	by map[string]int
	// perMinute is n over the hold's measured length.
	perMinute float64
}

// auditedHold waits d and counts the node's requests meanwhile, from the apiserver's audit
// log at path.
func auditedHold(ctx context.Context, path string, d time.Duration) (heldRequests, error) {
	from, begin := markAudit(path), time.Now()
	if err := sleep(ctx, d); err != nil {
		return heldRequests{}, err
	}
	to, elapsed := markAudit(path), time.Since(begin)
	if to < from {
		return heldRequests{}, fmt.Errorf("the audit log %s shrank during the hold (rotated?)", path)
	}
	n, by, err := countRequests(path, from, to)
	if err != nil {
		return heldRequests{}, err
	}
	return heldRequests{n: n, by: by, perMinute: float64(n) / elapsed.Minutes()}, nil
}

// cpuEvery samples pid's run time (runSeconds) every period until the returned stop is
// called, and stop returns the time run in each period, in milliseconds, the last one
// cut short by the stop: where an idle agent's CPU goes over the hold (its periodic work,
// the tail of its start). A reading that fails (the process gone) is left out.
func cpuEvery(pid int, period time.Duration) (stop func() []float64) {
	done := make(chan struct{})
	out := make(chan []float64)
	go func() {
		var ms []float64
		prev, _ := runSeconds(pid)
		sample := func() {
			if now, err := runSeconds(pid); err == nil {
				ms = append(ms, 1000*(now-prev))
				prev = now
			}
		}
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				sample()
			case <-done:
				sample()
				out <- ms
				return
			}
		}
	}()
	return func() []float64 {
		close(done)
		return <-out
	}
}

// writeIdleSeconds prints each round's idle hold second by second: the agent's CPU in
// ms, which shows its periodic work apart from the tail of its start.
func writeIdleSeconds(w io.Writer, sides map[string]sideResult) {
	var lines []string
	for _, side := range sidesOf(sides) {
		for i, ms := range sides[side].CPUIdleBySecond {
			parts := make([]string, len(ms))
			for j, m := range ms {
				parts[j] = strconv.FormatFloat(m, 'f', 1, 64)
			}
			lines = append(lines, fmt.Sprintf("- %s, round %d: %s", side, i+1, strings.Join(parts, " ")))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprint(w, "\nAgent CPU (ms) in each second of the idle hold:\n\n"+strings.Join(lines, "\n")+"\n")
}
