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

// runSeconds reads the threads' run time in nanoseconds: a 200-ms busy loop shows as
// that, where the clock ticks count it to 10 ms.
func TestRunSecondsOfABusyLoop(t *testing.T) {
	pid := os.Getpid()
	r0, err := runSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	c0, _ := cpuSeconds(pid)
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
	}
	r1, err := runSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := cpuSeconds(pid)
	if d := r1 - r0; d < 0.19 || d > 1 {
		t.Errorf("ran %.3f s over a 200-ms busy loop", d)
	}
	if d := (r1 - r0) - (c1 - c0); d < -0.05 || d > 0.05 {
		t.Errorf("run time %.3f s, clock ticks %.3f s: more than a few ticks apart", r1-r0, c1-c0)
	}
}
