package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The agent is built with the Makefile's AGENT_TAGS (grpcnotrace). A
// reachable call of a method by name through reflection (text/template's
// evalField, behind gRPC's golang.org/x/net/trace debug pages) makes the
// linker keep every exported method of every type in the binary: 10 MB of
// 51, resident when the agent runs. The linker's dependency dump marks such
// a call <ReflectMethod>.
func TestBinaryKeepsNoMethodForReflection(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test links the whole agent")
	}
	cmd := exec.Command("go", "build", "-tags", "grpcnotrace", "-ldflags=-dumpdep", "-o", filepath.Join(t.TempDir(), "nodeagent"), ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var dump bytes.Buffer
	cmd.Stderr = &dump
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v\n%.2000s", err, dump.String())
	}
	var edges int
	for sc := bufio.NewScanner(&dump); sc.Scan(); {
		line := sc.Text()
		edges++
		if strings.Contains(line, "<ReflectMethod>") {
			t.Errorf("reflective method call reachable: %s", line)
			break
		}
	}
	if edges < 1000 {
		t.Fatalf("the linker dumped %d dependencies: is -dumpdep still its flag?", edges)
	}
}
