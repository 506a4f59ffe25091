//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestAgentSIGKILLRestartsNoContainer is not parallel: the agent dies and comes back.
// Its 20 pods are found again by their labels: no container restarted, no sandbox doubled.
func TestAgentSIGKILLRestartsNoContainer(t *testing.T) {
	requireNodeagent(t)
	ctx := framework.Context(t, 5*time.Minute)
	type seen struct {
		containerIDs map[string]string
		restarts     map[string]int32
		sandbox      string
	}
	snapshot := func(p *corev1.Pod) seen {
		s := seen{containerIDs: map[string]string{}, restarts: map[string]int32{}}
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			s.containerIDs[cs.Name], s.restarts[cs.Name] = cs.ContainerID, cs.RestartCount
		}
		if sbs := sandboxesOf(t, string(p.UID)); len(sbs) == 1 {
			s.sandbox = sbs[0].Id
		}
		return s
	}
	var pods []*corev1.Pod
	before := map[string]seen{}
	for i := range 20 {
		pod := busyboxPod(fmt.Sprintf("survivor%d", i), corev1.RestartPolicyAlways, "sleep 3600")
		if i == 0 {
			pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: harness.BusyboxImage, Command: []string{"true"}}}
		}
		if i == 1 {
			// Volumes survive too: the file the pod wrote stays, nothing is mounted again.
			pod.Spec.Containers[0].Command = []string{"sh", "-c", "echo kept > /mem/f && echo kept > /disk/f && sleep 3600"}
			pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mem", MountPath: "/mem"}, {Name: "disk", MountPath: "/disk"}}
			pod.Spec.Volumes = []corev1.Volume{
				{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
				{Name: "disk", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			}
		}
		pods = append(pods, createPod(t, pod))
	}
	for _, pod := range pods {
		before[pod.Name] = snapshot(waitPod(t, pod, 2*time.Minute, runningAndReady))
	}
	volPod := pods[1]
	volDir := filepath.Join(agentRootDir(t), "pods", string(volPod.UID))
	mountsBefore := harness.MountsUnder(volDir)
	if len(mountsBefore) < 2 { // the tmpfs and the token volume
		t.Fatalf("mounts of the volume pod before the restart: %v", mountsBefore)
	}

	sigkillAndRestartAgent(t, ctx)
	// A new pod reaching Running shows the restarted agent is syncing pods again.
	probe := createPod(t, busyboxPod("after-restart", corev1.RestartPolicyAlways, "sleep 3600"))
	waitPod(t, probe, 2*time.Minute, runningAndReady)

	for _, pod := range pods {
		got := waitPod(t, pod, time.Minute, runningAndReady)
		after := snapshot(got)
		b := before[pod.Name]
		if after.sandbox == "" || after.sandbox != b.sandbox {
			t.Errorf("pod %s: sandbox %q before, %q after (want the same, exactly one)", pod.Name, b.sandbox, after.sandbox)
		}
		if pod == volPod {
			if after := harness.MountsUnder(volDir); !slices.Equal(after, mountsBefore) {
				t.Errorf("the pod's mounts changed over the agent restart:\nbefore %v\nafter  %v", mountsBefore, after)
			}
			if out := mustExec(t, pod, "main", "cat", "/mem/f", "/disk/f"); out != "kept\nkept\n" {
				t.Errorf("files the pod wrote, after the agent restart: %q", out)
			}
		}
		for name, id := range b.containerIDs {
			if after.containerIDs[name] != id || after.restarts[name] != b.restarts[name] {
				t.Errorf("pod %s container %s: %s/%d before, %s/%d after", pod.Name, name, id, b.restarts[name], after.containerIDs[name], after.restarts[name])
			}
		}
	}
}

// sigkillAndRestartAgent kills the node agent with SIGKILL, waits until it
// is gone and starts it again.
func sigkillAndRestartAgent(t *testing.T, ctx context.Context) {
	t.Helper()
	cfg := framework.Cluster(t)
	killAgent(t, cfg)
	if err := cfg.StartAgent(ctx); err != nil {
		t.Fatalf("start agent: %v", err)
	}
}

// killAgent kills the node agent with SIGKILL and waits until it is gone.
func killAgent(t *testing.T, cfg *harness.Config) {
	t.Helper()
	pid := cfg.Pids()["agent"]
	if pid == 0 {
		t.Fatal("no agent pid recorded")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL agent: %v", err)
	}
	framework.Eventually(t, 30*time.Second, func() error {
		if cfg.Running("agent") {
			return fmt.Errorf("agent %d still alive", pid)
		}
		return nil
	})
}
