package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/harness"
)

// cpuProfile asks the agent for a CPU profile of the next d through the apiserver's node
// proxy (/debug/pprof/profile, as for the kubelet) and writes it to path. It runs beside a
// round, so the profile covers the pods' creation and the start of their hold.
func cpuProfile(ctx context.Context, cs kubernetes.Interface, d time.Duration, path string) error {
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	data, err := cs.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/nodes", harness.NodeName, "proxy/debug/pprof/profile").
		Param("seconds", strconv.Itoa(int(d.Seconds()))).
		Timeout(d + time.Minute).
		DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// heapProfile writes the agent's heap profile, the memory in use after a garbage
// collection (/debug/pprof/heap?gc=1, through the node proxy), to path.
func heapProfile(ctx context.Context, cs kubernetes.Interface, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	data, err := cs.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/nodes", harness.NodeName, "proxy/debug/pprof/heap").
		Param("gc", "1").
		DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
