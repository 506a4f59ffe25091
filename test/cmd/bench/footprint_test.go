package main

import (
	"os"
	"path/filepath"
	"testing"
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
