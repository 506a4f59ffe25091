//go:build e2e

package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestStaticPodsRunWithoutAPIServer is the control-plane node's case: static pods run
// whether or not an apiserver answers. It lives here, with a cluster of its own, because it
// kills the apiserver. A static pod started with the apiserver up keeps running once it is
// gone; then the agent is restarted with no apiserver at all (as on a kubeadm node before
// its control plane exists) and a new manifest still runs, the old pod untouched.
func TestStaticPodsRunWithoutAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := &harness.Config{}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if cfg.Agent != harness.AgentNodeagent {
		t.Skipf("this test restarts nodeagent without an apiserver; NODEAGENT_AGENT=%s selects another agent", cfg.Agent)
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
		t.Fatalf("up: %v", err)
	}
	cs, err := cfg.Client()
	if err != nil {
		t.Fatal(err)
	}
	rt, _, closeFn, err := cfg.CRI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()

	writeManifest(t, cfg, "early", "sleep 3600")
	framework.Eventually(t, 2*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, "early-"+harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("mirror pod phase %s", p.Status.Phase)
		}
		return nil
	})
	early := runningContainer(ctx, t, rt, "early")
	if early == "" {
		t.Fatal("the static pod's container does not run")
	}

	pid := cfg.Pids()["kube-apiserver"]
	if pid == 0 {
		t.Fatal("no apiserver pid recorded")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, func() error {
		if cfg.Running("kube-apiserver") {
			return fmt.Errorf("apiserver %d still alive", pid)
		}
		return nil
	})
	// An agent that starts while no apiserver answers: it never lists the apiserver's pods.
	if err := cfg.StopAgent(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cfg.StartAgentNoWait(); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, cfg, "late", "sleep 3600")
	framework.Eventually(t, 2*time.Minute, func() error {
		if !cfg.Running("agent") {
			t.Fatalf("the agent exited without an apiserver: %s", cfg.ExitStatus("agent"))
		}
		if runningContainer(ctx, t, rt, "late") == "" {
			return fmt.Errorf("the static pod written with the apiserver down does not run")
		}
		return nil
	})
	if got := runningContainer(ctx, t, rt, "early"); got != early {
		t.Errorf("the first static pod's container is %q, was %q: it was restarted or stopped", got, early)
	}
	downAndAssertClean(ctx, t, cfg, before)
}

// writeManifest puts a busybox static pod running script into the agent's staticPodPath.
func writeManifest(t *testing.T, cfg *harness.Config, name, script string) {
	t.Helper()
	doc := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  terminationGracePeriodSeconds: 1\n"+
		"  containers: [{name: main, image: %q, command: [sh, -c, %q]}]\n", name, harness.BusyboxImage, script)
	tmp := filepath.Join(cfg.StaticPodDir(), "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(cfg.StaticPodDir(), name+".yaml")); err != nil {
		t.Fatal(err)
	}
}

// runningContainer is the ID of the running container of static pod name, or "".
func runningContainer(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient, name string) string {
	t.Helper()
	resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			"io.kubernetes.pod.name":      name + "-" + harness.NodeName,
			"io.kubernetes.pod.namespace": metav1.NamespaceDefault,
		},
	}})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	if len(resp.Containers) != 1 {
		return ""
	}
	return resp.Containers[0].Id
}
