//go:build e2e

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/podnet"
	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestPodNetworkBridge runs the node on nodeagent's own pod network: with the harness's CNI
// configuration taken away, an agent started with --pod-network=bridge writes its own from
// the Node's pod CIDR (the Node turns Ready on it), pods get addresses from that CIDR and
// reach each other, and pod traffic leaving the cluster CIDR is masqueraded. Restarted
// without the setting, the agent removes the configuration, the rule, the bridge and its
// record; the harness's network then serves pods again.
func TestPodNetworkBridge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := &harness.Config{}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if cfg.Agent != harness.AgentNodeagent {
		t.Skipf("--pod-network is nodeagent's; NODEAGENT_AGENT=%s selects another agent", cfg.Agent)
	}
	before, cs := framework.UpOwnCluster(ctx, t, cfg)
	if err := cfg.ApplyPodNetworkRBAC(ctx); err != nil {
		t.Fatal(err)
	}
	conflistPath := filepath.Join(cfg.CNIConfDir(), podnet.ConflistName)
	statePath := filepath.Join(cfg.AgentRootDir(), podnet.StateFileName)

	// The harness's network goes; the runtime's network is not ready until the agent
	// writes its own.
	if err := cfg.StopAgent(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(conflistPath); err != nil {
		t.Fatal(err)
	}
	if err := cfg.StartAgent(ctx, "--pod-network=bridge", "--cni-conf-dir="+cfg.CNIConfDir(),
		"--pod-network-bridge=na-cni0", "--cluster-cidr="+harness.ClusterCIDR); err != nil {
		t.Fatalf("start the agent with --pod-network=bridge: %v", err)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podCIDR := node.Spec.PodCIDR
	_, podNet, err := net.ParseCIDR(podCIDR)
	if err != nil {
		t.Fatalf("node's pod CIDR %q: %v", podCIDR, err)
	}
	// The Node may still show the Ready of the agent before; the file is the agent's sign.
	var list *libcni.NetworkConfigList
	framework.Eventually(t, time.Minute, func() error {
		list, err = libcni.ConfListFromFile(conflistPath)
		return err
	})
	if list.Name != podnet.NetworkName || !strings.Contains(string(list.Bytes), `"subnet": "`+podCIDR+`"`) ||
		!strings.Contains(string(list.Bytes), `"bridge": "na-cni0"`) {
		t.Fatalf("conflist is not the agent's for %s:\n%s", podCIDR, list.Bytes)
	}
	if _, err := os.Stat(statePath); err != nil {
		t.Fatalf("no record of the pod network: %v", err)
	}
	masq := `-A POSTROUTING -s ` + podCIDR + ` ! -d ` + harness.ClusterCIDR +
		` -m comment --comment "nodeagent: masquerade pod traffic leaving the cluster" -j MASQUERADE`
	framework.Eventually(t, time.Minute, func() error {
		if nat := iptablesSave(t, "nat"); strings.Count(nat, masq) != 1 {
			return fmt.Errorf("want once %s in:\n%s", masq, nat)
		}
		return nil
	})

	// Two pods on the agent's network: addresses from the pod CIDR, one reaches the other.
	server := runPod(ctx, t, cs, "podnet-server", corev1.RestartPolicyAlways, "sleep", "3600")
	serverIP := net.ParseIP(server.Status.PodIP)
	if serverIP == nil || !podNet.Contains(serverIP) {
		t.Fatalf("pod IP %q is not in the node's pod CIDR %s", server.Status.PodIP, podCIDR)
	}
	client := runPod(ctx, t, cs, "podnet-client", corev1.RestartPolicyNever, "ping", "-c", "3", "-W", "2", server.Status.PodIP)
	if ip := net.ParseIP(client.Status.PodIP); ip != nil && !podNet.Contains(ip) {
		t.Fatalf("pod IP %s is not in the node's pod CIDR %s", ip, podCIDR)
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, "podnet-client", metav1.GetOptions{})
		if err != nil {
			return err
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			t.Fatalf("ping %s from %s failed: %+v", serverIP, p.Status.PodIP, p.Status.ContainerStatuses)
		}
		return fmt.Errorf("ping pod: %s", p.Status.Phase)
	})
	// Their network is torn down through the agent's configuration while it is there, and
	// their stopped sandboxes removed (the runtime would tear a stopped sandbox's network down
	// again through whatever configuration is current then).
	deletePods(ctx, t, cs, "podnet-server", "podnet-client")
	removeSandboxes(ctx, t, cfg, "podnet-server", "podnet-client")

	// Off again: the agent removes what it made, and nothing else.
	if err := cfg.StopAgent(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cfg.StartAgentNoWait(); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func() error {
		for _, p := range []string{conflistPath, statePath, filepath.Join(cfg.AgentRootDir(), "pod-network-ipam")} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%s is still there (%v)", p, err)
			}
		}
		if nat := iptablesSave(t, "nat") + iptablesSave(t, "filter"); strings.Contains(nat, "nodeagent:") {
			return fmt.Errorf("rules left:\n%s", nat)
		}
		if _, err := os.Stat("/sys/class/net/na-cni0"); err == nil {
			return errors.New("the bridge na-cni0 is still there")
		}
		return nil
	})
	if out, _ := exec.Command("ip", "route", "show", "proto", fmt.Sprint(podnet.RouteProtocol)).Output(); len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("routes of the agent left: %s", out)
	}

	// The harness's network back, for what runs next: the node is Ready on it and a pod runs.
	if err := cfg.RestoreCNIConfig(); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("node not Ready on the harness's network")
	})
	runPod(ctx, t, cs, "podnet-after", corev1.RestartPolicyAlways, "sleep", "3600")
	deletePods(ctx, t, cs, "podnet-after")
	removeSandboxes(ctx, t, cfg, "podnet-after")
	downAndAssertClean(ctx, t, cfg, before)
}

func iptablesSave(t *testing.T, table string) string {
	t.Helper()
	out, err := exec.Command("iptables-save", "-t", table).CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save -t %s: %v: %s", table, err, out)
	}
	return string(out)
}

// runPod creates a busybox pod and waits until it has an IP and runs (or ran).
func runPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, restart corev1.RestartPolicy, command ...string) *corev1.Pod {
	t.Helper()
	zero := int64(0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			RestartPolicy:                 restart,
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []corev1.Container{{Name: "main", Image: harness.BusyboxImage, Command: command}},
		},
	}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	var got *corev1.Pod
	framework.Eventually(t, 3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ended := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		if !ended && (p.Status.PodIP == "" || p.Status.Phase == corev1.PodPending) {
			return fmt.Errorf("pod %s: %s, IP %q", name, p.Status.Phase, p.Status.PodIP)
		}
		got = p
		return nil
	})
	return got
}

// deletePods deletes the pods and waits until they are gone.
func deletePods(ctx context.Context, t *testing.T, cs kubernetes.Interface, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := cs.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete pod %s: %v", name, err)
		}
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		for _, name := range names {
			if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s still there (%v)", name, err)
			}
		}
		return nil
	})
}

// removeSandboxes removes the pods' sandboxes from the runtime, as the kubelet's garbage
// collection does some time after a pod is gone.
func removeSandboxes(ctx context.Context, t *testing.T, cfg *harness.Config, names ...string) {
	t.Helper()
	rt, _, closeFn, err := cfg.CRI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	// The agent removes them too, once the pods are gone: a removal may race its own (the
	// runtime then tears down a network that is going), so each round removes what is left
	// and the helper is done when none is.
	framework.Eventually(t, time.Minute, func() error {
		resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		var errs []error
		for _, sb := range resp.Items {
			if !slices.Contains(names, sb.GetMetadata().GetName()) {
				continue
			}
			if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
				errs = append(errs, fmt.Errorf("remove the sandbox of %s: %w", sb.GetMetadata().GetName(), err))
			} else {
				errs = append(errs, fmt.Errorf("the sandbox of %s was there", sb.GetMetadata().GetName()))
			}
		}
		return errors.Join(errs...)
	})
}
