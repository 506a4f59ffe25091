package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCountRequests(t *testing.T) {
	log := `{"stage":"ResponseStarted","verb":"watch","user":{"username":"system:node:n"},"objectRef":{"resource":"pods"}}
{"stage":"ResponseComplete","verb":"get","user":{"username":"system:node:n"},"objectRef":{"resource":"volumeattachments"}}
{"stage":"ResponseComplete","verb":"get","user":{"username":"system:node:n"},"objectRef":{"resource":"volumeattachments"}}
{"stage":"ResponseComplete","verb":"patch","user":{"username":"system:node:n"},"objectRef":{"resource":"pods","subresource":"status"}}
{"stage":"ResponseComplete","verb":"get","user":{"username":"system:kube-scheduler"},"objectRef":{"resource":"pods"}}
`
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	n, by, err := countRequests(path, 0, markAudit(path))
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || by["get volumeattachments"] != 2 || by["patch pods/status"] != 1 || len(by) != 2 {
		t.Errorf("countRequests = %d, %v; want 3: 2 get volumeattachments, 1 patch pods/status", n, by)
	}
}

// runSeconds reads the threads' run time in nanoseconds: over a busy loop of 200 ms of
// CPU (as the clock ticks count it, however loaded the machine), it reads the same within
// a few ticks.
func TestRunSecondsOfABusyLoop(t *testing.T) {
	pid := os.Getpid()
	r0, err := runSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	c0, _ := cpuSeconds(pid)
	c1 := c0
	for deadline := time.Now().Add(30 * time.Second); c1-c0 < 0.2; c1, _ = cpuSeconds(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("200 ms of CPU not reached in 30 s (%.2f s)", c1-c0)
		}
		for start := time.Now(); time.Since(start) < 10*time.Millisecond; {
		}
	}
	r1, err := runSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	if d := (r1 - r0) - (c1 - c0); d < -0.05 || d > 0.05 {
		t.Errorf("run time %.3f s, clock ticks %.3f s: more than a few ticks apart", r1-r0, c1-c0)
	}
}

// A thread that ends between two readings keeps its time in the second: a goroutine
// that locks its thread and returns without unlocking it ends the thread with it (as
// containerd's network namespace work does).
func TestRunSecondsKeepsAnEndedThreadsTime(t *testing.T) {
	pid := os.Getpid()
	r0, err := runSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	type burnt struct {
		tid     int
		seconds float64
	}
	burn := func() burnt {
		done := make(chan burnt)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			tid := syscall.Gettid()
			ran := func() float64 {
				data, err := os.ReadFile("/proc/thread-self/schedstat")
				if err != nil {
					return 0
				}
				ns, _ := strconv.ParseInt(strings.Fields(string(data))[0], 10, 64)
				return float64(ns) / 1e9
			}
			// The thread may have run before the goroutine took it: what it
			// ran before counts in the first reading.
			from, used := ran(), 0.0
			for deadline := time.Now().Add(30 * time.Second); used < 0.3 && time.Now().Before(deadline); used = ran() - from {
				for start := time.Now(); time.Since(start) < 10*time.Millisecond; {
				}
			}
			done <- burnt{tid, used}
		}()
		return <-done
	}
	b := burn()
	if b.tid == pid {
		// Go keeps the main thread (it is wedged, not ended): again, elsewhere, from a
		// reading that has the main thread's time.
		if r0, err = runSeconds(pid); err != nil {
			t.Fatal(err)
		}
		b = burn()
	}
	if b.seconds < 0.3 {
		t.Fatalf("the thread ran %.3f s, not 0.3 s, in 30 s", b.seconds)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, b.tid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still there 10 s after its goroutine returned", b.tid)
		}
	}
	r1, err := runSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	if r1-r0 < b.seconds-0.02 {
		t.Errorf("run time grew by %.3f s while a thread that has ended ran %.3f s", r1-r0, b.seconds)
	}
}

// cpuEvery splits the process's run time by period: what a spinning process ran is in
// the periods, to the stop (the last period is cut short by it).
func TestCPUEverySplitsTheRunTime(t *testing.T) {
	pid := os.Getpid()
	before, err := runSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	stop := cpuEvery(pid, 20*time.Millisecond)
	// Spin until 300 ms have run, however busy the machine is.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if now, _ := runSeconds(pid); now-before >= 0.3 {
			break
		}
	}
	ms := stop()
	after, _ := runSeconds(pid)
	if len(ms) < 2 {
		t.Fatalf("%d periods of 20 ms over at least 300 ms run, want more: %v", len(ms), ms)
	}
	// runSeconds counts the time of ended threads in 10-ms ticks (the process's less its
	// live threads'), so a period may be off by a tick or two either way.
	const ticks = 20
	var sum float64
	for _, m := range ms {
		if m < -ticks {
			t.Errorf("a period ran %v ms", m)
		}
		sum += m
	}
	// The sampler's first reading comes a moment after before (later still on a busy
	// machine, where its thread may wait for a core while the spinning one runs).
	if sum < 150 || sum > 1000*(after-before)+ticks {
		t.Errorf("the periods hold %.1f ms; the process ran %.1f ms, at least 300: %v", sum, 1000*(after-before), ms)
	}
}

func TestWriteIdleSeconds(t *testing.T) {
	var b strings.Builder
	writeIdleSeconds(&b, map[string]sideResult{
		"nodeagent": {CPUIdleBySecond: [][]float64{{4.51, 0, 7.1}}},
		"kubelet":   {CPUIdleBySecond: [][]float64{{10}, {12.25}}},
	})
	want := "\nAgent CPU (ms) in each second of the idle hold:\n\n" +
		"- nodeagent, round 1: 4.5 0.0 7.1\n- kubelet, round 1: 10.0\n- kubelet, round 2: 12.2\n"
	if b.String() != want {
		t.Errorf("got %q\nwant %q", b.String(), want)
	}
	b.Reset()
	writeIdleSeconds(&b, map[string]sideResult{"floor": {}})
	if b.Len() != 0 {
		t.Errorf("without series: %q", b.String())
	}
}
