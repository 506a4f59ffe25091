//go:build e2e

// Package lifecycle tests the harness itself: a cluster whose processes are all SIGKILLed
// comes up again, and teardown leaves nothing of it on the machine. It runs after the main
// suite, whose own teardown it checks first.
package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

func TestKillRecoverAndTeardownLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// With the hostpath CSI driver of make up: its bidirectional mounts, its volumes'
	// stagings and publications and its data dir must go with the rest; and with its
	// kube-proxy, whose rules a SIGKILL leaves in the kernel.
	cfg := &harness.Config{CSIHostpath: true, Services: true}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	// Another harness run on this machine (a cluster being brought up or down) must not be
	// read as left behind: hold the lock from the first look.
	if err := cfg.Lock(); err != nil {
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
	runCSIVolumePod(ctx, t, cfg)

	downAndAssertClean(ctx, t, cfg, before)
	if _, err := os.Stat(cfg.CSIHostpathDataDir()); !os.IsNotExist(err) {
		t.Errorf("the CSI driver's data dir %s is still there (%v)", cfg.CSIHostpathDataDir(), err)
	}
}

// runCSIVolumePod leaves a pod running with a volume of the default StorageClass: staged,
// published, attached, with its data in the driver's data dir.
func runCSIVolumePod(ctx context.Context, t *testing.T, cfg *harness.Config) {
	t.Helper()
	cs, err := cfg.Client()
	if err != nil {
		t.Fatal(err)
	}
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "lifecycle-data", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{ // no class: the default one
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PVC: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lifecycle-csi", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "sleeper", Image: harness.BusyboxImage, Command: []string{"sleep", "3600"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name}}}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	framework.Eventually(t, 3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s: %s", pod.Name, p.Status.Phase)
		}
		return nil
	})
	if m := harness.MountsUnder(filepath.Join(cfg.AgentRootDir(), "plugins", "kubernetes.io", "csi", harness.CSIHostpathDriver)); len(m) == 0 {
		t.Fatalf("no staging mount of %s under the agent's root dir", harness.CSIHostpathDriver)
	}
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
	if err := cfg.Lock(); err != nil { // no other harness run changes the machine meanwhile
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
