//go:build e2e

package lifecycle

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestOutages shows the node riding out the outages of what it depends on, on a cluster
// of its own:
//   - the kube-apiserver stopped for 2 minutes with 30 probed pods running: no container
//     is killed or restarted, while the agent goes on probing — a liveness probe failing
//     meanwhile restarts its container, a readiness probe failing makes its pod unready —
//     and within a minute of the apiserver's return every pod's status says so;
//   - containerd stopped and started 3 times under 50 pods: every pod Running and Ready
//     again each time with its first containers, and once the pods are deleted nothing is
//     left of them (mounts, pod cgroups, pod IPs, shims, network namespaces).
func TestOutages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cfg := &harness.Config{}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if cfg.Agent == harness.AgentNone {
		t.Skip("outages need a node agent; NODEAGENT_AGENT=none selects none")
	}
	before, cs := framework.UpOwnCluster(ctx, t, cfg)
	o := &outageSuite{ctx: ctx, cs: cs, cfg: cfg}
	empty := o.nodeState(t)
	var pods []string
	for i := range 30 {
		pods = append(pods, "steady-"+strconv.Itoa(i))
	}
	o.createProbed(t, pods...)
	o.createProbed(t, "liveness")
	o.waitRunning(t, append(pods, "liveness")...)

	t.Run("apiserver away for 2 minutes", func(t *testing.T) { o.apiServerAway(t, pods) })
	for i := range 20 {
		pods = append(pods, "more-"+strconv.Itoa(i))
	}
	o.createProbed(t, pods[30:]...)
	t.Run("containerd restarted 3 times under 50 pods", func(t *testing.T) { o.containerdRestarts(t, pods, empty) })
	downAndAssertClean(ctx, t, cfg, before)
}

type outageSuite struct {
	ctx context.Context
	cs  kubernetes.Interface
	cfg *harness.Config
	// first is each pod's container ID when first Running and Ready.
	first sync.Map
}

// createProbed creates busybox pods with a liveness and a readiness probe every 2 s: the
// liveness probe passes until /tmp/dead exists (so that a first probe run before the shell
// has made any file, on a loaded machine, does not kill the container), the readiness probe
// while /tmp/ready is there. The probes have 5 s to run:
// a runtime just restarted, restoring the shims of 50 pods on 2 cores, can take more than
// the default second to run a command, which the kubelet too would count as a failure.
func (o *outageSuite) createProbed(t *testing.T, names ...string) {
	t.Helper()
	grace := int64(1)
	probe := func(test ...string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: append([]string{"test"}, test...)}},
			// Three failures in a row: a single exec that times out while containerd
			// restarts on a loaded machine (seen on two cores) is no outage the agent
			// mishandled; a real failure still restarts within six seconds.
			PeriodSeconds: 2, FailureThreshold: 3, TimeoutSeconds: 5}
	}
	for _, name := range names {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
			Spec: corev1.PodSpec{
				NodeName:                      harness.NodeName,
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{
					Name: "main", Image: harness.BusyboxImage,
					Command:        []string{"sh", "-c", "touch /tmp/ready; exec sleep 3600"},
					LivenessProbe:  probe("!", "-e", "/tmp/dead"),
					ReadinessProbe: probe("-f", "/tmp/ready"),
				}},
			},
		}
		if _, err := o.cs.CoreV1().Pods(pod.Namespace).Create(o.ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
	}
}

// waitRunning waits for the pods to be Running and Ready with one container that never
// restarted, and the same container each time it is called.
func (o *outageSuite) waitRunning(t *testing.T, names ...string) {
	t.Helper()
	framework.Eventually(t, 4*time.Minute, func() error {
		list, err := o.cs.CoreV1().Pods(metav1.NamespaceDefault).List(o.ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		byName := map[string]*corev1.Pod{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		for _, name := range names {
			p := byName[name]
			if p == nil {
				return fmt.Errorf("pod %s is gone", name)
			}
			if err := runningReady(p); err != nil {
				return fmt.Errorf("pod %s: %w", name, err)
			}
			c := p.Status.ContainerStatuses[0]
			if c.RestartCount != 0 {
				t.Fatalf("pod %s: container restarted %d times (%+v)", name, c.RestartCount, c.LastTerminationState)
			}
			if id, seen := o.first.LoadOrStore(name, c.ContainerID); seen && id != c.ContainerID {
				t.Fatalf("pod %s runs container %s, want its first, %s", name, c.ContainerID, id)
			}
		}
		return nil
	})
}

func runningReady(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
		return fmt.Errorf("phase %s, %d container statuses", p.Status.Phase, len(p.Status.ContainerStatuses))
	}
	if c := p.Status.ContainerStatuses[0]; !c.Ready || c.State.Running == nil {
		return fmt.Errorf("container ready %v, state %+v", c.Ready, c.State)
	}
	return nil
}

func (o *outageSuite) apiServerAway(t *testing.T, steady []string) {
	rt, _, closeFn, err := o.cfg.CRI(o.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	running := o.runningContainers(t, rt)
	livenessID := o.containerID(t, "liveness")
	rssBefore := o.agentRSS(t)
	lease, err := o.cs.CoordinationV1().Leases("kube-node-lease").Get(o.ctx, harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := o.cfg.StopAPIServer(o.ctx); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = o.cfg.StartAPIServer(context.Background())
		}
	})
	// While it is away: the liveness pod's file goes (its container must be restarted by
	// the agent alone), and one steady pod's readiness file.
	unready := steady[len(steady)-1]
	o.exec(t, rt, running["liveness"], "touch", "/tmp/dead")
	o.exec(t, rt, running[unready], "rm", "/tmp/ready")
	restartedAlone := false
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		now := o.runningContainers(t, rt)
		for _, name := range steady {
			if now[name] != running[name] {
				t.Fatalf("pod %s: running container %q while the apiserver is away, want %q still", name, now[name], running[name])
			}
		}
		if id := now["liveness"]; id != "" && id != running["liveness"] {
			restartedAlone = true
		}
		select {
		case <-o.ctx.Done():
			t.Fatal(o.ctx.Err())
		case <-time.After(5 * time.Second):
		}
	}
	if !restartedAlone {
		t.Errorf("the liveness pod's container was not restarted while the apiserver was away")
	}
	if err := o.cfg.StartAPIServer(o.ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	back := time.Now()

	// Within a minute of its return, every status is right.
	framework.Eventually(t, time.Minute, func() error {
		list, err := o.cs.CoreV1().Pods(metav1.NamespaceDefault).List(o.ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range list.Items {
			p := &list.Items[i]
			switch c := p.Status.ContainerStatuses; {
			case p.Name == unready:
				if len(c) != 1 || c[0].Ready || c[0].State.Running == nil || c[0].RestartCount != 0 {
					return fmt.Errorf("pod %s: %+v, want running, not ready, no restart", p.Name, c)
				}
			case p.Name == "liveness":
				if len(c) != 1 || c[0].RestartCount < 1 || c[0].ContainerID == livenessID || c[0].LastTerminationState.Terminated == nil {
					return fmt.Errorf("pod liveness: %+v, want restarted with its last state", c)
				}
			case slices.Contains(steady, p.Name):
				if err := runningReady(p); err != nil {
					return fmt.Errorf("pod %s: %w", p.Name, err)
				}
				if c[0].RestartCount != 0 {
					return fmt.Errorf("pod %s restarted", p.Name)
				}
			}
		}
		node, err := o.cs.CoreV1().Nodes().Get(o.ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				return fmt.Errorf("node Ready %s: %s", c.Status, c.Message)
			}
		}
		l, err := o.cs.CoordinationV1().Leases("kube-node-lease").Get(o.ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !l.Spec.RenewTime.After(lease.Spec.RenewTime.Time) || l.Spec.RenewTime.Before(&metav1.MicroTime{Time: back.Add(-time.Second)}) {
			return fmt.Errorf("lease renewed at %s, want after the apiserver's return at %s", l.Spec.RenewTime, back)
		}
		return nil
	})
	o.waitRunning(t, steady[:len(steady)-1]...)
	// What the agent held while the apiserver was away (status writes, events) is bounded.
	if rss := o.agentRSS(t); rss > rssBefore+64<<20 {
		t.Errorf("agent RSS grew from %d to %d MiB over the outage", rssBefore>>20, rss>>20)
	}
	// The readiness file back, the pod is Ready again; the liveness pod goes.
	o.exec(t, rt, o.runningContainers(t, rt)[unready], "touch", "/tmp/ready")
	o.waitRunning(t, steady...)
	deletePods(o.ctx, t, o.cs, "liveness")
}

func (o *outageSuite) containerdRestarts(t *testing.T, pods []string, empty nodeState) {
	o.waitRunning(t, pods...)
	for i := range 3 {
		if err := o.cfg.StopContainerd(o.ctx); err != nil {
			t.Fatal(err)
		}
		o.waitNodeReady(t, corev1.ConditionFalse)
		if err := o.cfg.StartContainerd(o.ctx); err != nil {
			t.Fatalf("start containerd (%d): %v", i+1, err)
		}
		o.waitNodeReady(t, corev1.ConditionTrue)
		o.waitRunning(t, pods...)
	}
	deletePods(o.ctx, t, o.cs, pods...)
	rt, _, closeFn, err := o.cfg.CRI(o.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	framework.Eventually(t, 3*time.Minute, func() error {
		resp, err := rt.ListPodSandbox(o.ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		if n := len(resp.GetItems()); n > 0 {
			return fmt.Errorf("%d sandboxes left in the runtime", n)
		}
		if diff := o.nodeState(t).diff(empty); diff != "" {
			return fmt.Errorf("left of the pods: %s", diff)
		}
		return nil
	})
}

func (o *outageSuite) waitNodeReady(t *testing.T, want corev1.ConditionStatus) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func() error {
		node, err := o.cs.CoreV1().Nodes().Get(o.ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == want {
				return nil
			}
		}
		return fmt.Errorf("node not Ready=%s yet", want)
	})
}

// runningContainers maps each pod's name to its running container's ID, from the runtime.
func (o *outageSuite) runningContainers(t *testing.T, rt runtimeapi.RuntimeServiceClient) map[string]string {
	t.Helper()
	resp, err := rt.ListContainers(o.ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	if err != nil {
		t.Fatalf("CRI ListContainers: %v", err)
	}
	out := map[string]string{}
	for _, c := range resp.GetContainers() {
		out[c.GetLabels()["io.kubernetes.pod.name"]] = c.GetId()
	}
	return out
}

// containerID is the pod's container ID as its status says.
func (o *outageSuite) containerID(t *testing.T, pod string) string {
	t.Helper()
	p, err := o.cs.CoreV1().Pods(metav1.NamespaceDefault).Get(o.ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

func (o *outageSuite) exec(t *testing.T, rt runtimeapi.RuntimeServiceClient, id string, cmd ...string) {
	t.Helper()
	resp, err := rt.ExecSync(o.ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 10})
	if err != nil || resp.GetExitCode() != 0 {
		t.Fatalf("exec %q in %s: %v (exit %d, %s)", cmd, id, err, resp.GetExitCode(), resp.GetStderr())
	}
}

// agentRSS is the agent's resident memory.
func (o *outageSuite) agentRSS(t *testing.T) int64 {
	t.Helper()
	pid := o.cfg.Pids()["agent"]
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("agent (pid %d): %v", pid, err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// nodeState is what pods leave on the node if something leaks: mounts in the run dir
// (volumes, rootfs, netns), the pod cgroups, the pod IPs held, the runtime's shims, the
// named network namespaces.
type nodeState map[string][]string

func (o *outageSuite) nodeState(t *testing.T) nodeState {
	t.Helper()
	m, err := framework.ReadMachineState(o.cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := nodeState{"mounts": m.Mounts, "netns": m.Netns}
	for _, p := range m.Processes {
		if strings.Contains(p, "containerd-shim") {
			s["shims"] = append(s["shims"], p)
		}
	}
	for _, hier := range []string{"memory", "cpu", "pids"} {
		root := filepath.Join("/sys/fs/cgroup", hier, harness.CgroupRoot)
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "pod") {
				s["pod cgroups"] = append(s["pod cgroups"], path)
			}
			return nil
		})
	}
	_ = filepath.WalkDir(o.cfg.PodIPAMDir(), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), "last_reserved_ip") && d.Name() != "lock" {
			s["pod IPs"] = append(s["pod IPs"], path)
		}
		return nil
	})
	return s
}

// diff names what s has that before had not.
func (s nodeState) diff(before nodeState) string {
	var out []string
	for _, kind := range slices.Sorted(maps.Keys(s)) {
		for _, item := range s[kind] {
			if !slices.Contains(before[kind], item) {
				out = append(out, kind+": "+item)
			}
		}
	}
	return strings.Join(out, "; ")
}
