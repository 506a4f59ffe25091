//go:build e2e

package lifecycle

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
	cfg, before, cs, rt := upStaticPodCluster(ctx, t, "this test restarts nodeagent without an apiserver")

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

// TestStaticPodsFromURL is the kubelet's staticPodURL: the agent, restarted with
// --manifest-url and --manifest-url-header, runs the pod a local server answers, the header
// sent with every read; the server changing the pod replaces it, and an empty answer stops
// it. The first node's agent runs in the machine's namespaces: a server on 127.0.0.1 is
// reachable from it.
func TestStaticPodsFromURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg, before, cs, rt := upStaticPodCluster(ctx, t, "")

	const name = "from-url"
	srv := newPodServer(t)
	srv.serve(staticPodManifest(name, "echo v1; sleep 3600"))
	if err := cfg.StopAgent(ctx); err != nil {
		t.Fatal(err)
	}
	restored := false
	// Whatever happens, the agent ends as the harness starts it. Cleanups run last first:
	// this one before Down.
	t.Cleanup(func() {
		if restored {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_ = cfg.StopAgent(ctx)
		if err := cfg.StartAgent(ctx); err != nil {
			t.Logf("restart the agent with its usual flags: %v", err)
		}
	})
	// httpCheckFrequency 1s rather than 20s, through its deprecated flag.
	if err := cfg.StartAgent(ctx, "--manifest-url="+srv.URL+"/pod.yaml", "--manifest-url-header=X-Test:yes",
		"--http-check-frequency=1s"); err != nil {
		t.Fatal(err)
	}

	// mirrored waits for the mirror pod of the served pod running script to run, and
	// returns it.
	mirrored := func(script string) *corev1.Pod {
		t.Helper()
		var mirror *corev1.Pod
		framework.Eventually(t, 3*time.Minute, func() error {
			if !cfg.Running("agent") {
				t.Fatalf("the agent exited: %s", cfg.ExitStatus("agent"))
			}
			p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name+"-"+harness.NodeName, metav1.GetOptions{})
			switch {
			case err != nil:
				return err
			case p.Annotations["kubernetes.io/config.source"] != "http":
				return fmt.Errorf("mirror pod's config.source %q, want http", p.Annotations["kubernetes.io/config.source"])
			case !slices.Equal(p.Spec.Containers[0].Command, []string{"sh", "-c", script}):
				return fmt.Errorf("mirror pod's command %q, want the script %q", p.Spec.Containers[0].Command, script)
			case p.Status.Phase != corev1.PodRunning:
				return fmt.Errorf("mirror pod phase %s", p.Status.Phase)
			}
			mirror = p
			return nil
		})
		return mirror
	}
	first := mirrored("echo v1; sleep 3600")
	if n, without := srv.requests(); n == 0 || without > 0 {
		t.Errorf("%d requests, %d of them without the header X-Test: yes", n, without)
	}
	firstContainer := runningContainer(ctx, t, rt, name)
	if firstContainer == "" {
		t.Fatal("the pod read from the URL has no running container")
	}

	// A changed pod is a new pod: the old one stops, the new one runs, mirrored anew.
	srv.serve(staticPodManifest(name, "echo v2; sleep 3600"))
	second := mirrored("echo v2; sleep 3600")
	if second.UID == first.UID || second.Annotations["kubernetes.io/config.mirror"] == first.Annotations["kubernetes.io/config.mirror"] {
		t.Errorf("the changed pod's mirror has the first one's UID %s or hash %s", second.UID, second.Annotations["kubernetes.io/config.mirror"])
	}
	framework.Eventually(t, time.Minute, func() error {
		if got := runningContainer(ctx, t, rt, name); got == "" || got == firstContainer {
			return fmt.Errorf("running container %q, want one (not the first pod's %s)", got, firstContainer)
		}
		return nil
	})

	// An empty answer: no pods at all.
	srv.serve("")
	framework.Eventually(t, 3*time.Minute, func() error {
		_, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name+"-"+harness.NodeName, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the mirror pod is still there (%v)", err)
		}
		if id := runningContainer(ctx, t, rt, name); id != "" {
			return fmt.Errorf("container %s still runs", id)
		}
		return nil
	})

	if err := cfg.StopAgent(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cfg.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	restored = true
	downAndAssertClean(ctx, t, cfg, before)
}

// upStaticPodCluster brings up a harness cluster of the test's own, holding the machine's
// lock, to be torn down when the test ends, and returns it, the machine's state before it
// (for downAndAssertClean), its client and its runtime. The test is skipped without an
// agent, and with another agent than nodeagent when onlyNodeagent says why it needs it.
func upStaticPodCluster(ctx context.Context, t *testing.T, onlyNodeagent string) (
	*harness.Config, framework.MachineState, kubernetes.Interface, runtimeapi.RuntimeServiceClient) {
	t.Helper()
	cfg := &harness.Config{}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	switch {
	case onlyNodeagent != "" && cfg.Agent != harness.AgentNodeagent:
		t.Skipf("%s; NODEAGENT_AGENT=%s selects another agent", onlyNodeagent, cfg.Agent)
	case cfg.Agent == harness.AgentNone:
		t.Skip("static pods need a node agent; NODEAGENT_AGENT=none selects none")
	}
	before, cs := framework.UpOwnCluster(ctx, t, cfg)
	rt, _, closeFn, err := cfg.CRI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return cfg, before, cs, rt
}

// staticPodManifest is a busybox static pod running script.
func staticPodManifest(name, script string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  terminationGracePeriodSeconds: 1\n"+
		"  containers: [{name: main, image: %q, command: [sh, -c, %q]}]\n", name, harness.BusyboxImage, script)
}

// writeManifest puts a busybox static pod running script into the agent's staticPodPath.
func writeManifest(t *testing.T, cfg *harness.Config, name, script string) {
	t.Helper()
	tmp := filepath.Join(cfg.StaticPodDir(), "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(staticPodManifest(name, script)), 0o644); err != nil {
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

// podServer answers every GET with the body last set, on 127.0.0.1, and counts the
// requests and those without the header X-Test: yes.
type podServer struct {
	*httptest.Server

	mu       sync.Mutex
	body     string
	n        int
	noHeader int
}

func newPodServer(t *testing.T) *podServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &podServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.n++
		if r.Header.Get("X-Test") != "yes" {
			s.noHeader++
		}
		_, _ = w.Write([]byte(s.body))
	}))
	s.Listener.Close()
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *podServer) serve(body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = body
}

func (s *podServer) requests() (n, withoutHeader int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.noHeader
}
