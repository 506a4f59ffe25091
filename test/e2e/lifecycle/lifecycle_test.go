//go:build e2e

// Package lifecycle tests the harness itself: a cluster whose processes are all SIGKILLed
// comes up again, and teardown leaves nothing of it on the machine. It runs after the main
// suite, whose own teardown it checks first.
package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

func TestKillRecoverAndTeardownLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cfg := &harness.Config{}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	before, err := framework.ReadMachineState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Whatever ran before (the main e2e suite, make down) must have left nothing.
	if left := framework.Leftovers(before, before); len(left) > 0 {
		t.Errorf("the previous teardown left behind:\n  %s", strings.Join(left, "\n  "))
	}
	t.Cleanup(func() { _ = harness.Down(context.Background(), cfg) })

	if err := harness.Up(ctx, cfg); err != nil {
		t.Fatalf("up: %v", err)
	}
	// Leave state behind that only a real teardown removes: a running sandbox (netns, CNI
	// rules and IP, rootfs mounts, a cgroup) and a container in it.
	runSandbox(ctx, t, cfg, "before-kill")

	pids := cfg.Pids()
	if len(pids) < 6 {
		t.Fatalf("only %d harness processes recorded: %v", len(pids), pids)
	}
	for name, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL %s (%d): %v", name, pid, err)
		}
	}
	framework.Eventually(t, 30*time.Second, func() error {
		if left := cfg.Pids(); len(left) > 0 {
			return fmt.Errorf("still alive after SIGKILL: %v", left)
		}
		return nil
	})

	if err := harness.Up(ctx, cfg); err != nil {
		t.Fatalf("up after SIGKILL: %v", err)
	}
	assertWorks(ctx, t, cfg)
	runSandbox(ctx, t, cfg, "after-recovery")

	downAndAssertClean(ctx, t, cfg, before)
}

// downAndAssertClean tears the cluster down and fails if anything of it is left on the
// machine that was not there before.
func downAndAssertClean(ctx context.Context, t *testing.T, cfg *harness.Config, before framework.MachineState) {
	t.Helper()
	if err := harness.Down(ctx, cfg); err != nil {
		t.Fatalf("down: %v", err)
	}
	after, err := framework.ReadMachineState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if left := framework.Leftovers(before, after); len(left) > 0 {
		t.Fatalf("down left behind:\n  %s", strings.Join(left, "\n  "))
	}
}

func assertWorks(ctx context.Context, t *testing.T, cfg *harness.Config) {
	t.Helper()
	cs, err := cfg.Client()
	if err != nil {
		t.Fatal(err)
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil || string(body) != "ok" {
		t.Fatalf("readyz after recovery: %q %v", body, err)
	}
	rt, _, closeFn, err := cfg.CRI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("CRI Version after recovery: %v", err)
	}
	if cfg.Agent == harness.AgentNone {
		return
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node after recovery: %v", err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Fatalf("node not Ready after recovery: %s %s", c.Reason, c.Message)
		}
	}
}

// runSandbox starts a sandbox with a sleeping busybox container and leaves it running.
func runSandbox(ctx context.Context, t *testing.T, cfg *harness.Config, name string) {
	t.Helper()
	rt, _, closeFn, err := cfg.CRI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "harness-lifecycle", Uid: name},
		Hostname:     name,
		LogDirectory: cfg.RunDir + "/e2e-logs/" + name,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: harness.CgroupRoot + "/lifecycle-" + name},
		PortMappings: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: 18080, HostIp: harness.NodeIP}},
	}
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox %s: %v", name, err)
	}
	ctr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sb.PodSandboxId, SandboxConfig: sbCfg,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "sleeper"},
			Image:    &runtimeapi.ImageSpec{Image: harness.BusyboxImage},
			Command:  []string{"sleep", "3600"},
			LogPath:  "sleeper.log",
		},
	})
	if err != nil {
		t.Fatalf("CreateContainer in %s: %v", name, err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatalf("StartContainer in %s: %v", name, err)
	}
}

// TestDebianContainerd1_6 shows the older CRI runtime still serves the node: Debian's
// containerd 1.6 comes up with the harness's config, the agent registers a Ready node on it,
// a sandbox runs, and teardown leaves nothing.
func TestDebianContainerd1_6(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := &harness.Config{Runtime: harness.RuntimeContainerdDebian}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	before, err := framework.ReadMachineState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = harness.Down(context.Background(), cfg) })
	if err := harness.Up(ctx, cfg); err != nil {
		t.Fatalf("up with %s: %v", cfg.Runtime, err)
	}
	assertWorks(ctx, t, cfg)
	rt, _, closeFn, err := cfg.CRI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil || !strings.HasPrefix(strings.TrimPrefix(v.GetRuntimeVersion(), "v"), "1.6.") {
		t.Fatalf("CRI Version = %+v, %v; want Debian's containerd 1.6", v, err)
	}
	runSandbox(ctx, t, cfg, "on-1.6")
	downAndAssertClean(ctx, t, cfg, before)
}
