//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestSecondAgentOnOneRootDirRefused is not parallel: were the lock broken, the
// second agent would fight the first over every pod until its deadline. It runs the
// agent's binary with the harness's own flags beside the running agent: the second
// exits non-zero naming the root dir and the first agent's pid, and the first runs on.
func TestSecondAgentOnOneRootDirRefused(t *testing.T) {
	requireNodeagent(t)
	cfg := framework.Cluster(t)
	first := cfg.AgentPid()
	if first == 0 {
		t.Fatal("no agent running")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.RunDir, "bin", "nodeagent"), cfg.AgentArgs()...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the second agent was still running after a minute:\n%s", stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("second agent: %v, want a non-zero exit:\n%s", err, stderr.String())
	}
	for _, want := range []string{"root dir " + cfg.AgentRootDir() + " is in use by another nodeagent", fmt.Sprintf("(pid %d)", first)} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the second agent's output does not say %q:\n%s", want, stderr.String())
		}
	}
	if cfg.AgentPid() != first {
		t.Errorf("agent pid %d before, %d after the second one tried", first, cfg.AgentPid())
	}
	waitReady(t, corev1.ConditionTrue, 30*time.Second)
	probe := createPod(t, busyboxPod("after-second-agent", corev1.RestartPolicyAlways, "sleep 3600"))
	waitPod(t, probe, 2*time.Minute, runningAndReady)
}

// TestAgentKilledBetweenCreateAndStart is not parallel: the agent dies and comes back.
// An agent that waits between a container's create and its start (the hidden
// --create-start-delay) is SIGKILLed while an app container, and an init container of
// another pod, are created and not started. The next agent starts those very containers:
// none is created twice, no restart is counted, and no last state is shown.
func TestAgentKilledBetweenCreateAndStart(t *testing.T) {
	requireNodeagent(t)
	ctx := framework.Context(t, 6*time.Minute)
	cfg := framework.Cluster(t)
	killAgent(t, cfg)
	if err := cfg.StartAgent(ctx, "--create-start-delay=5m"); err != nil {
		t.Fatalf("start the agent with --create-start-delay: %v", err)
	}
	delayed := true
	t.Cleanup(func() {
		if !delayed {
			return
		}
		// Leave the next tests an agent that starts containers.
		killAgent(t, cfg)
		if err := cfg.StartAgent(context.Background()); err != nil {
			t.Errorf("start the agent again: %v", err)
		}
	})

	app := createPod(t, busyboxPod("left-created", corev1.RestartPolicyAlways, "sleep 3600"))
	withInit := busyboxPod("init-left-created", corev1.RestartPolicyAlways, "sleep 3600")
	withInit.Spec.InitContainers = []corev1.Container{{Name: "init", Image: harness.BusyboxImage, Command: []string{"true"}}}
	withInit = createPod(t, withInit)
	leftovers := map[string]string{} // pod name → the created container's ID
	framework.Eventually(t, 2*time.Minute, func() error {
		for _, p := range []struct{ pod, container string }{{app.Name, "main"}, {withInit.Name, "init"}} {
			uid := string(app.UID)
			if p.pod == withInit.Name {
				uid = string(withInit.UID)
			}
			cs := containersOfPod(t, uid)
			if len(cs) != 1 || cs[0].Metadata.Name != p.container || cs[0].State != runtimeapi.ContainerState_CONTAINER_CREATED {
				return fmt.Errorf("pod %s: containers %s, want %s alone and created", p.pod, describeContainers(cs), p.container)
			}
			leftovers[p.pod] = cs[0].Id
		}
		return nil
	})

	killAgent(t, cfg)
	if err := cfg.StartAgent(ctx); err != nil {
		t.Fatalf("start the agent again: %v", err)
	}
	delayed = false

	for _, pod := range []*corev1.Pod{app, withInit} {
		got := waitPod(t, pod, 2*time.Minute, runningAndReady)
		name, statuses := "main", got.Status.ContainerStatuses
		if pod == withInit {
			name, statuses = "init", got.Status.InitContainerStatuses
		}
		for _, cs := range append(append([]corev1.ContainerStatus{}, got.Status.InitContainerStatuses...), got.Status.ContainerStatuses...) {
			if cs.RestartCount != 0 || cs.LastTerminationState != (corev1.ContainerState{}) {
				t.Errorf("pod %s container %s: restartCount %d, lastState %+v; want 0 and none", pod.Name, cs.Name, cs.RestartCount, cs.LastTerminationState)
			}
		}
		for _, cs := range statuses {
			if cs.Name == name && !strings.HasSuffix(cs.ContainerID, "://"+leftovers[pod.Name]) {
				t.Errorf("pod %s container %s is %s, want the one left created, %s", pod.Name, name, cs.ContainerID, leftovers[pod.Name])
			}
		}
		n := 0
		for _, c := range containersOfPod(t, string(pod.UID)) {
			if c.Metadata.Name == name {
				n++
			}
		}
		if n != 1 {
			t.Errorf("pod %s: %d containers named %s in the runtime, want the one", pod.Name, n, name)
		}
	}
}

// TestLeftoversOfAKilledAgentCollected is not parallel: the agent dies and comes back.
// What an agent killed at the wrong moment leaves in the runtime is collected by the next:
// a pod deleted while the agent was dead, whose container was left CREATED (killed between
// create and start) and whose sandbox had been stopped (killed in its termination), leaves
// neither container nor sandbox; and a running pod whose sandbox exited meanwhile runs
// again, in one new ready sandbox.
func TestLeftoversOfAKilledAgentCollected(t *testing.T) {
	requireNodeagent(t)
	ctx := framework.Context(t, 8*time.Minute)
	cfg := framework.Cluster(t)
	cs := framework.Client(t)
	rt, _ := framework.CRI(t)
	live := waitPod(t, createPod(t, busyboxPod("sandbox-exits", corev1.RestartPolicyAlways, "sleep 3600")), 2*time.Minute, runningAndReady)

	killAgent(t, cfg)
	if err := cfg.StartAgent(ctx, "--create-start-delay=5m"); err != nil {
		t.Fatalf("start the agent with --create-start-delay: %v", err)
	}
	delayed := true
	t.Cleanup(func() {
		if delayed {
			killAgent(t, cfg)
			if err := cfg.StartAgent(context.Background()); err != nil {
				t.Errorf("start the agent again: %v", err)
			}
		}
	})
	gone := createPod(t, busyboxPod("deleted-while-created", corev1.RestartPolicyAlways, "sleep 3600"))
	framework.Eventually(t, 2*time.Minute, func() error {
		if c := containersOfPod(t, string(gone.UID)); len(c) != 1 || c[0].State != runtimeapi.ContainerState_CONTAINER_CREATED {
			return fmt.Errorf("pod %s: containers %s, want one created", gone.Name, describeContainers(c))
		}
		return nil
	})
	killAgent(t, cfg)

	oldLive := sandboxesOf(t, string(live.UID))
	goneSandboxes := sandboxesOf(t, string(gone.UID))
	if len(oldLive) != 1 || len(goneSandboxes) != 1 {
		t.Fatalf("sandboxes: %d of %s, %d of %s; want one each", len(oldLive), live.Name, len(goneSandboxes), gone.Name)
	}
	for _, sb := range []*runtimeapi.PodSandbox{oldLive[0], goneSandboxes[0]} {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			t.Fatalf("CRI StopPodSandbox %s: %v", sb.Id, err)
		}
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(gone.Namespace).Delete(ctx, gone.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.StartAgent(ctx); err != nil {
		t.Fatalf("start the agent again: %v", err)
	}
	delayed = false

	framework.Eventually(t, 3*time.Minute, func() error {
		c, sb := containersOfPod(t, string(gone.UID)), sandboxesOf(t, string(gone.UID))
		if len(c) > 0 || len(sb) > 0 {
			return fmt.Errorf("deleted pod %s: containers %s and %d sandboxes left", gone.Name, describeContainers(c), len(sb))
		}
		return nil
	})
	framework.Eventually(t, 3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(live.Namespace).Get(ctx, live.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := runningAndReady(p); err != nil {
			return err
		}
		var ready []string
		for _, sb := range sandboxesOf(t, string(live.UID)) {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				ready = append(ready, sb.Id)
			}
		}
		if len(ready) != 1 || ready[0] == oldLive[0].Id {
			return fmt.Errorf("pod %s: ready sandboxes %q, want one new (the old was %s)", live.Name, ready, oldLive[0].Id)
		}
		return nil
	})
}

// TestAgentKilledAtEveryStep is not parallel: the agent is SIGKILLed again and again.
// Bursts of pods (an init container, configMap and emptyDir volumes, probes, a postStart
// and a preStop hook) are created, and some deleted, and each burst the agent is killed at a
// random moment — inside a sandbox's creation, a volume's set-up, a create or a start, a
// hook, a termination — and started again at once. In the end no running container was
// restarted: every pod left is Running and Ready with restartCount 0 everywhere (or more
// for a container whose predecessors never ran: a kill inside StartContainer cancels the
// start itself, as containerd aborts a start whose caller went away — on a slow machine a
// start takes seconds, and a burst's kill lands in one often — and any agent then makes
// the container anew, the kubelet counting it as a restart too; such predecessors have no
// termination to show, where a running container killed and replaced leaves its last
// state terminated, and one left running is a second container of its name), holds
// exactly one ready sandbox in the runtime and one container of each name, and the runtime
// holds nothing of the pods deleted.
func TestAgentKilledAtEveryStep(t *testing.T) {
	requireNodeagent(t)
	ctx := framework.Context(t, 12*time.Minute)
	cfg := framework.Cluster(t)
	cs := framework.Client(t)
	seed := time.Now().UnixNano()
	t.Logf("random kill moments: seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	cm, err := cs.CoreV1().ConfigMaps(podNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "killed-", Namespace: podNS}, Data: map[string]string{"setting": "on"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ConfigMaps(podNS).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	newPod := func(i int) *corev1.Pod {
		pod := busyboxPod(fmt.Sprintf("killed-%d", i), corev1.RestartPolicyAlways, "touch /tmp/ready; exec sleep 3600")
		pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: harness.BusyboxImage, Command: []string{"cat", "/config/setting"},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/config"}}}}
		pod.Spec.Volumes = []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
		c := &pod.Spec.Containers[0]
		c.VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/config"}, {Name: "scratch", MountPath: "/scratch"}}
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/ready"}}}, PeriodSeconds: 10}
		if i%2 == 1 {
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 10}
		}
		c.Lifecycle = &corev1.Lifecycle{
			PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"touch", "/scratch/started"}}},
			PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
		}
		return pod
	}

	var live, deleted []*corev1.Pod
	for round := range 12 {
		for j := range 3 {
			live = append(live, createPod(t, newPod(round*3+j)))
		}
		if round > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(live))
			if err := cs.CoreV1().Pods(podNS).Delete(ctx, live[i].Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			deleted = append(deleted, live[i])
			live = slices.Delete(live, i, i+1)
		}
		// The moment of the kill: anywhere in the burst's first seconds.
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(time.Duration(rng.Int64N(int64(3 * time.Second)))):
		}
		killAgent(t, cfg)
		if err := cfg.StartAgent(ctx); err != nil {
			t.Fatalf("start the agent again (round %d): %v", round, err)
		}
	}

	for _, pod := range live {
		got := waitPod(t, pod, 4*time.Minute, runningAndReady)
		for _, s := range append(append([]corev1.ContainerStatus{}, got.Status.InitContainerStatuses...), got.Status.ContainerStatuses...) {
			neverRan := s.RestartCount > 0 && s.LastTerminationState == (corev1.ContainerState{})
			if neverRan {
				t.Logf("pod %s container %s: restartCount %d with no last state: starts cut by kills, never ran", pod.Name, s.Name, s.RestartCount)
			}
			if s.RestartCount != 0 && !neverRan {
				t.Errorf("pod %s container %s: restartCount %d (last state %+v), want 0", pod.Name, s.Name, s.RestartCount, s.LastTerminationState)
			}
		}
	}
	framework.Eventually(t, 3*time.Minute, func() error {
		for _, pod := range live {
			var ready int
			for _, sb := range sandboxesOf(t, string(pod.UID)) {
				if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
					ready++
				}
			}
			names := map[string]int{}
			for _, c := range containersOfPod(t, string(pod.UID)) {
				names[c.Metadata.Name]++
			}
			if ready != 1 || names["init"] != 1 || names["main"] != 1 || len(names) != 2 {
				return fmt.Errorf("pod %s: %d ready sandboxes, containers %v; want one, and one of each", pod.Name, ready, names)
			}
		}
		for _, pod := range deleted {
			if _, err := cs.CoreV1().Pods(podNS).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("deleted pod %s still in the apiserver", pod.Name)
			}
			if c, sb := containersOfPod(t, string(pod.UID)), sandboxesOf(t, string(pod.UID)); len(c) > 0 || len(sb) > 0 {
				return fmt.Errorf("deleted pod %s: containers %s and %d sandboxes in the runtime", pod.Name, describeContainers(c), len(sb))
			}
		}
		return nil
	})
}

// TestDuplicateSandboxStopped is not parallel: the agent dies and comes back. While it is
// dead, a second ready sandbox of a running pod appears in the runtime, of the next attempt,
// as an agent leaves that gave up on a RunPodSandbox (a timeout) and made another that it
// never saw answered. The next agent stops the one that holds nothing and the pod runs on in
// its own, with no restart (the kubelet would start the pod again in a third sandbox).
func TestDuplicateSandboxStopped(t *testing.T) {
	requireNodeagent(t)
	ctx := framework.Context(t, 5*time.Minute)
	cfg := framework.Cluster(t)
	rt, _ := framework.CRI(t)
	pod := waitPod(t, createPod(t, busyboxPod("duplicate-sandbox", corev1.RestartPolicyAlways, "sleep 3600")), 2*time.Minute, runningAndReady)
	own := sandboxesOf(t, string(pod.UID))
	if len(own) != 1 {
		t.Fatalf("%d sandboxes of the pod, want one", len(own))
	}
	status, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: own[0].Id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	// The runtime's record of the sandbox's config gives the cgroup parent, so the
	// duplicate lies where the agent's own would.
	var info struct {
		Config struct {
			Linux struct {
				CgroupParent string `json:"cgroup_parent"`
			} `json:"linux"`
			LogDirectory string `json:"log_directory"`
		} `json:"config"`
	}
	if err := json.Unmarshal([]byte(status.GetInfo()["info"]), &info); err != nil || info.Config.Linux.CgroupParent == "" {
		t.Fatalf("sandbox status info: %v (cgroup parent %q)", err, info.Config.Linux.CgroupParent)
	}

	killAgent(t, cfg)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := cfg.StartAgent(context.Background()); err != nil {
				t.Errorf("start the agent again: %v", err)
			}
		}
	})
	// The runtime reserves a sandbox's name, attempt included, so the duplicate is of the
	// next attempt: what an agent that counted its sandbox as failed makes next.
	m := own[0].Metadata
	meta := runtimeapi.PodSandboxMetadata{Name: m.Name, Uid: m.Uid, Namespace: m.Namespace, Attempt: m.Attempt + 1}
	dup, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &meta,
		Labels:       own[0].Labels,
		Annotations:  own[0].Annotations,
		LogDirectory: info.Config.LogDirectory,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: info.Config.Linux.CgroupParent},
	}})
	if err != nil {
		t.Fatalf("CRI RunPodSandbox: %v", err)
	}
	if err := cfg.StartAgent(ctx); err != nil {
		t.Fatalf("start the agent again: %v", err)
	}
	restarted = true

	framework.Eventually(t, 2*time.Minute, func() error {
		for _, sb := range sandboxesOf(t, string(pod.UID)) {
			if sb.Id == dup.PodSandboxId && sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				return fmt.Errorf("the duplicate sandbox %s is still ready", dup.PodSandboxId)
			}
			if sb.Id == own[0].Id && sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Fatalf("the pod's own sandbox %s was stopped", sb.Id)
			}
		}
		return nil
	})
	got := waitPod(t, pod, time.Minute, runningAndReady)
	if c := got.Status.ContainerStatuses[0]; c.RestartCount != 0 || c.ContainerID != pod.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("the pod's container: %s restarted %d times, want %s running on", c.ContainerID, c.RestartCount, pod.Status.ContainerStatuses[0].ContainerID)
	}
}
