package main

import (
	"os"
	"path/filepath"
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
