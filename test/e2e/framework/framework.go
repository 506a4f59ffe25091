// Package framework is what the end-to-end suites share: one cluster per test binary,
// brought up by TestMain through the harness, and black-box helpers that act on it the way
// a user would (client-go, kubectl, crictl-like CRI calls).
package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/harness"
)

var cluster *harness.Config

// Main brings up the shared cluster, runs the tests, and tears the cluster down (unless
// NODEAGENT_KEEP=1). A cluster that does not come up fails the whole binary loudly.
func Main(m *testing.M) {
	// The suite's cluster is the user's: with the hostpath CSI driver, kube-proxy and
	// CoreDNS of make up.
	os.Exit(mainCode(m, &harness.Config{CSIHostpath: true, Services: true}))
}

// MainWith is Main for a suite whose cluster is shaped by cfg (several nodes, say). It
// also checks that the teardown leaves nothing of the cluster on the machine.
func MainWith(m *testing.M, cfg *harness.Config) {
	if err := cfg.Complete(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	if err := cfg.Lock(); err != nil { // no other harness run changes the machine meanwhile
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	before, err := ReadMachineState(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: read the machine's state:", err)
		os.Exit(1)
	}
	code := mainCode(m, cfg)
	if code == 0 && os.Getenv("NODEAGENT_KEEP") != "1" {
		after, err := ReadMachineState(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: read the machine's state:", err)
			os.Exit(1)
		}
		if left := Leftovers(before, after); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the teardown left:\n  %s\n", strings.Join(left, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}

// upTimeout bounds bringing the cluster up, the first time with every build (about 25
// minutes on a fresh machine of 2 cores); downTimeout bounds the teardown. Each has its
// own context: the teardown never inherits what the build and the tests used up of a
// shared deadline (on a fresh machine it once started with none left, and every stop
// failed at once).
const (
	upTimeout   = 50 * time.Minute
	downTimeout = 5 * time.Minute
)

func mainCode(m *testing.M, cfg *harness.Config) int {
	down := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), downTimeout)
		defer cancel()
		return harness.Down(ctx, cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), upTimeout)
	defer cancel()
	if err := harness.Up(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the harness cluster did not come up: %v\n", err)
		if derr := down(); derr != nil {
			fmt.Fprintf(os.Stderr, "teardown after the failure: %v\n", derr)
		}
		return 1
	}
	cluster = cfg
	code := m.Run()
	if os.Getenv("NODEAGENT_KEEP") == "1" {
		fmt.Fprintf(os.Stderr, "NODEAGENT_KEEP=1: the cluster stays up\n%s", cfg.Env())
		return code
	}
	if err := down(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: teardown: %v\n", err)
		return 1
	}
	return code
}

// Cluster returns the running cluster's configuration.
func Cluster(t testing.TB) *harness.Config {
	t.Helper()
	if cluster == nil {
		t.Fatal("no cluster: call framework.Main from TestMain")
	}
	return cluster
}

// Client returns an admin clientset.
func Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := Cluster(t).Client()
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return cs
}

// Kubectl runs the upstream kubectl of the pinned version against the cluster and returns
// its standard output; a non-zero exit fails the test.
func Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := KubectlErr(t, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// KubectlErr is Kubectl that returns the error instead of failing.
func KubectlErr(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := KubectlCommand(t, ctx, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return string(out), nil
}

// KubectlCommand returns the pinned kubectl, set up for the cluster, as a command the caller
// wires and starts itself: for kubectl that streams (logs -f, attach, port-forward) or needs
// a terminal. It is killed when ctx ends.
func KubectlCommand(t testing.TB, ctx context.Context, args ...string) *exec.Cmd {
	t.Helper()
	c := Cluster(t)
	version, err := harness.KubeVersion(c.RepoDir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir(version), "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig())
	return cmd
}

// CRI returns clients of the cluster's runtime over the test's one connection, dialed at
// its first call and closed with the test.
func CRI(t testing.TB) (runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) {
	t.Helper()
	if c, ok := criClients.Load(t); ok {
		c := c.(criClient)
		return c.rt, c.img
	}
	rt, img, closeFn, err := Cluster(t).CRI(context.Background())
	if err != nil {
		t.Fatalf("dial CRI: %v", err)
	}
	criClients.Store(t, criClient{rt, img})
	t.Cleanup(func() {
		criClients.Delete(t)
		closeFn()
	})
	return rt, img
}

// criClients holds each test's one CRI connection: helpers that list the runtime's
// containers in a polling loop would otherwise open a connection at every look, kept until
// the test ends, and run the runtime out of file descriptors.
var criClients sync.Map // testing.TB → criClient

type criClient struct {
	rt  runtimeapi.RuntimeServiceClient
	img runtimeapi.ImageServiceClient
}

// Context returns a context that ends with the test or after timeout.
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond until it returns nil or timeout passes, then fails with its last error.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %s: %v", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// RunReady creates pod (a generateName works) and waits up to 3 minutes for it to be Ready,
// returning it as it is then; it is deleted (grace 0) when the test ends.
func RunReady(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := Context(t, 3*time.Minute)
	cs := Client(t)
	created, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod = created // its name, when the pod asked for a generated one
	t.Cleanup(func() {
		zero := int64(0)
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	var got *corev1.Pod
	Eventually(t, 3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				got = p
				return nil
			}
		}
		return fmt.Errorf("pod %s on %s not ready: phase %s %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.ContainerStatuses)
	})
	return got
}

// UpOwnCluster brings up a harness cluster shaped by cfg (already completed) for one test:
// it takes the machine's lock, reads the machine's state first (for a leftovers check at
// the end), and tears the cluster down when the test ends. It returns that state and an
// admin client.
func UpOwnCluster(ctx context.Context, t *testing.T, cfg *harness.Config) (MachineState, kubernetes.Interface) {
	t.Helper()
	if err := cfg.Lock(); err != nil { // no other harness run changes the machine meanwhile
		t.Fatal(err)
	}
	before, err := ReadMachineState(cfg)
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
	return before, cs
}

// ReadyNodes checks that each of the cluster's nodes is Ready at its address with a pod
// CIDR no other node has, and returns the Node objects in the order of Cluster().Nodes().
func ReadyNodes(t *testing.T) []*corev1.Node {
	t.Helper()
	ctx := Context(t, time.Minute)
	cidrs := map[string]string{}
	var out []*corev1.Node
	for _, n := range Cluster(t).Nodes() {
		node, err := Client(t).CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		var internal string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = a.Address
			}
		}
		if !ready || internal != n.IP || node.Spec.PodCIDR == "" {
			t.Errorf("node %s: ready %v, InternalIP %q (want %s), podCIDR %q", n.Name, ready, internal, n.IP, node.Spec.PodCIDR)
		}
		if other, dup := cidrs[node.Spec.PodCIDR]; dup {
			t.Errorf("nodes %s and %s share the pod CIDR %s", other, n.Name, node.Spec.PodCIDR)
		}
		cidrs[node.Spec.PodCIDR] = n.Name
		out = append(out, node)
	}
	return out
}

// RestartAgentWith stops the shared cluster's agent and starts it again with config
// (KubeletConfiguration fields, as YAML without apiVersion and kind) in a drop-in of a
// --config-dir of its own, and flags. When the test ends, the agent is started again with
// the harness's configuration alone.
func RestartAgentWith(t *testing.T, ctx context.Context, config string, flags ...string) {
	t.Helper()
	cfg := Cluster(t)
	dir := t.TempDir()
	doc := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + config
	if err := os.WriteFile(filepath.Join(dir, "90-test.conf"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cfg.StopAgent(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cfg.StopAgent(ctx)
		if err := cfg.StartAgent(ctx); err != nil {
			t.Errorf("start the agent with the harness's configuration again: %v", err)
		}
	})
	if err := cfg.StartAgent(ctx, append([]string{"--config-dir=" + dir}, flags...)...); err != nil {
		t.Fatalf("start the agent with %q: %v", config, err)
	}
}

// Artefact returns where the test keeps a file of the given name for people to look at
// after the run: in the harness's artefacts directory, as <test>-<name>, which later
// clusters leave in place.
func Artefact(t testing.TB, name string) string {
	t.Helper()
	dir := Cluster(t).ArtefactsDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name)
}
