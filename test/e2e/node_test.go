//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

func getNode(t *testing.T) *corev1.Node {
	t.Helper()
	node, err := framework.Client(t).CoreV1().Nodes().Get(framework.Context(t, 10*time.Second), harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	return node
}

func condition(node *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == typ {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// waitReady waits for the node's Ready condition to have status want, and returns it.
func waitReady(t *testing.T, want corev1.ConditionStatus, timeout time.Duration) *corev1.NodeCondition {
	t.Helper()
	var got *corev1.NodeCondition
	framework.Eventually(t, timeout, func() error {
		node, err := framework.Client(t).CoreV1().Nodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got = condition(node, corev1.NodeReady)
		if got == nil || got.Status != want {
			return fmt.Errorf("node Ready = %+v, want %s", got, want)
		}
		return nil
	})
	return got
}

func requireNodeagent(t *testing.T) {
	t.Helper()
	if a := framework.Cluster(t).Agent; a != harness.AgentNodeagent {
		t.Fatalf("this test is about nodeagent; the harness runs %q (NODEAGENT_AGENT)", a)
	}
}

func TestNodeRegistersTruthfully(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	node := getNode(t)
	for k, want := range map[string]string{
		"kubernetes.io/hostname": harness.NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
	} {
		if got := node.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	addrs := map[corev1.NodeAddressType]string{}
	for _, a := range node.Status.Addresses {
		addrs[a.Type] = a.Address
	}
	if addrs[corev1.NodeInternalIP] != harness.NodeIP || addrs[corev1.NodeHostName] != harness.NodeName {
		t.Errorf("addresses %v, want InternalIP %s and Hostname %s", node.Status.Addresses, harness.NodeIP, harness.NodeName)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
		c, a := node.Status.Capacity[r], node.Status.Allocatable[r]
		if c.IsZero() || a.IsZero() {
			t.Errorf("%s: capacity %s allocatable %s, want both set", r, c.String(), a.String())
		}
	}
	if p := node.Status.Capacity[corev1.ResourcePods]; p.Cmp(resource.MustParse("110")) != 0 {
		t.Errorf("pods capacity %s, want the default maxPods 110", p.String())
	}
	// Allocatable memory leaves room for the default hard eviction threshold (100Mi).
	capMem, allocMem := node.Status.Capacity[corev1.ResourceMemory], node.Status.Allocatable[corev1.ResourceMemory]
	if diff := capMem.Value() - allocMem.Value(); diff != 100*1024*1024 {
		t.Errorf("capacity - allocatable memory = %d, want 100Mi", diff)
	}
	version, _ := harness.KubeVersion(framework.Cluster(t).RepoDir)
	info := node.Status.NodeInfo
	if info.KubeletVersion != version || !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://") ||
		info.BootID == "" || info.KernelVersion == "" || info.OSImage == "" || info.OperatingSystem != "linux" || info.Architecture != "amd64" {
		t.Errorf("nodeInfo %+v is incomplete", info)
	}
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("kubelet endpoint port %d, want 10250", node.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}
	want := map[corev1.NodeConditionType]string{
		corev1.NodeReady: "KubeletReady", corev1.NodeMemoryPressure: "KubeletHasSufficientMemory",
		corev1.NodeDiskPressure: "KubeletHasNoDiskPressure", corev1.NodePIDPressure: "KubeletHasSufficientPID",
	}
	for typ, reason := range want {
		c := condition(node, typ)
		if c == nil || c.Reason != reason {
			t.Errorf("condition %s = %+v, want reason %s", typ, c, reason)
		}
	}
	if len(node.Status.Images) == 0 {
		t.Errorf("node lists no images; the runtime holds %d", len(harness.Images()))
	}
}

// TestNodeStaysReady watches the node for a while: the Lease is renewed and the node
// lifecycle controller never marks the node unknown.
func TestNodeStaysReady(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 5*time.Minute)
	lease, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != harness.NodeName {
		t.Errorf("lease holder %v, want %s", lease.Spec.HolderIdentity, harness.NodeName)
	}
	// A Lease created while the Node was being registered again gets its owner on the
	// next renewal, as with the kubelet.
	framework.Eventually(t, 30*time.Second, func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if refs := l.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != node.UID {
			return fmt.Errorf("lease owner references %+v, want the Node %s", refs, node.UID)
		}
		return nil
	})
	first := lease.Spec.RenewTime.Time
	// Minutes, several times the node lifecycle controller's grace period (50s).
	deadline := time.Now().Add(3 * time.Minute)
	renewed := false
	for time.Now().Before(deadline) {
		node, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get node: %v", err)
		}
		if c := condition(node, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
			t.Fatalf("node stopped being Ready: %+v", c)
		}
		if l, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, harness.NodeName, metav1.GetOptions{}); err == nil && l.Spec.RenewTime.After(first) {
			renewed = true
		}
		time.Sleep(time.Second)
	}
	if !renewed {
		t.Errorf("lease not renewed in 3m (renewTime still %s)", first)
	}
}

// TestRuntimeOutageMakesNodeNotReady is not parallel: it stops the shared runtime.
func TestRuntimeOutageMakesNodeNotReady(t *testing.T) {
	requireNodeagent(t)
	cfg := framework.Cluster(t)
	ctx := framework.Context(t, 3*time.Minute)
	waitReady(t, corev1.ConditionTrue, time.Minute)
	if err := cfg.StopContainerd(ctx); err != nil {
		t.Fatalf("stop containerd: %v", err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = cfg.StartContainerd(context.Background())
		}
	})
	c := waitReady(t, corev1.ConditionFalse, time.Minute)
	if c.Reason != "KubeletNotReady" || !strings.Contains(c.Message, "runtime") {
		t.Errorf("Ready=False with reason %q message %q, want KubeletNotReady naming the runtime", c.Reason, c.Message)
	}
	if err := cfg.StartContainerd(ctx); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	restarted = true
	waitReady(t, corev1.ConditionTrue, time.Minute)
}

// TestDeletedNodeRegistersAgain is not parallel: the node disappears for a moment.
func TestDeletedNodeRegistersAgain(t *testing.T) {
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 2*time.Minute)
	old := getNode(t)
	if err := cs.CoreV1().Nodes().Delete(ctx, harness.NodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete node: %v", err)
	}
	framework.Eventually(t, time.Minute, func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errors.New("node not registered again yet")
		} else if err != nil {
			return err
		}
		if node.UID == old.UID {
			return errors.New("still the deleted node")
		}
		return nil
	})
	waitReady(t, corev1.ConditionTrue, time.Minute)
}

// TestKubeadmConfigStartsWithDefaults restarts the agent on the KubeletConfiguration that
// kubeadm v1.37 writes (full of zero values), with the harness's paths in a --config-dir
// drop-in, as kubeadm's own drop-ins do.
func TestKubeadmConfigStartsWithDefaults(t *testing.T) {
	requireNodeagent(t)
	cfg := framework.Cluster(t)
	ctx := framework.Context(t, 3*time.Minute)
	version, _ := harness.KubeVersion(cfg.RepoDir)
	out, err := exec.CommandContext(ctx, filepath.Join(cfg.BinDir(version), "kubeadm"), "config", "print", "init-defaults", "--component-configs", "KubeletConfiguration").Output()
	if err != nil {
		t.Fatalf("kubeadm config print: %v", err)
	}
	var kubeletDoc string
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if strings.Contains(doc, "kind: KubeletConfiguration") {
			kubeletDoc = doc
		}
	}
	if !strings.Contains(kubeletDoc, "syncFrequency: 0s") {
		t.Fatalf("kubeadm's KubeletConfiguration has no zero values to default:\n%s", kubeletDoc)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(kubeletDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	dropins := filepath.Join(dir, "config.d")
	if err := os.MkdirAll(dropins, 0o755); err != nil {
		t.Fatal(err)
	}
	// kubeadm's file names systemd and /etc/kubernetes; this machine has neither.
	if err := os.WriteFile(filepath.Join(dropins, "10-harness.conf"), []byte(cfg.AgentConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cfg.StopAgent(ctx); err != nil {
		t.Fatal(err)
	}
	// SIGTERM is a clean stop, as systemd and kubeadm expect.
	framework.Eventually(t, 10*time.Second, func() error {
		if st := cfg.ExitStatus("agent"); st != "exit status 0" {
			return fmt.Errorf("agent ended with %q after SIGTERM, want exit status 0", st)
		}
		return nil
	})
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cfg.StopAgent(ctx)
		if err := cfg.StartAgent(ctx); err != nil {
			t.Errorf("restart the agent with the harness config: %v", err)
		}
	})
	if err := cfg.StartAgent(ctx, "--config="+filepath.Join(dir, "config.yaml"), "--config-dir="+dropins); err != nil {
		t.Fatalf("agent on kubeadm's config: %v", err)
	}
	node := getNode(t)
	if p := node.Status.Capacity[corev1.ResourcePods]; p.Cmp(resource.MustParse("110")) != 0 {
		t.Errorf("pods capacity %s, want the default 110", p.String())
	}
	// kubeadm polls the default healthz endpoint while it waits for the node.
	framework.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get("http://127.0.0.1:10248/healthz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			return fmt.Errorf("healthz: %s %q", resp.Status, body)
		}
		return nil
	})
}

func TestInvalidConfigExitsNamingTheField(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cfg := framework.Cluster(t)
	dir := t.TempDir()
	bad := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnodeLeaseDurationSeconds: -5\n"
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(cfg.RunDir, "bin", "nodeagent"), "--config="+filepath.Join(dir, "bad.yaml"),
		"--kubeconfig="+filepath.Join(dir, "missing.conf"), "--root-dir="+filepath.Join(dir, "root"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("nodeagent with an invalid config: err %v, want a non-zero exit\n%s", err, out)
	}
	if !strings.Contains(string(out), "nodeLeaseDurationSeconds") {
		t.Errorf("error does not name the field:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "root")); err == nil {
		t.Errorf("the root dir was created although the config was invalid")
	}
	version, _ := harness.KubeVersion(cfg.RepoDir)
	v, err := exec.Command(filepath.Join(cfg.RunDir, "bin", "nodeagent"), "--version").Output()
	if err != nil || strings.TrimSpace(string(v)) != "Kubernetes "+version {
		t.Errorf("nodeagent --version = %q (%v), want %q", v, err, "Kubernetes "+version)
	}
}
