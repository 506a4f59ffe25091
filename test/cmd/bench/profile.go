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
	return saveProfile(ctx, cs, "profile", "seconds", strconv.Itoa(int(d.Seconds())), d+time.Minute, path)
}

// heapProfile writes the agent's heap profile, the memory in use after a garbage
// collection (/debug/pprof/heap?gc=1, through the node proxy), to path.
func heapProfile(ctx context.Context, cs kubernetes.Interface, path string) error {
	return saveProfile(ctx, cs, "heap", "gc", "1", time.Minute, path)
}

// saveProfile GETs the agent's /debug/pprof/<kind>?<param>=<value> through the node proxy
// within timeout and writes it to path.
func saveProfile(ctx context.Context, cs kubernetes.Interface, kind, param, value string, timeout time.Duration, path string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	data, err := cs.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/nodes", harness.NodeName, "proxy/debug/pprof", kind).
		Param(param, value).
		Timeout(timeout).
		DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("%s profile: %w", kind, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
