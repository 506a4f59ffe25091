//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

const cgroupMount = "/sys/fs/cgroup"

func rlist(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// sleepPod is a one-container busybox pod sleeping with the given resources.
func sleepPod(prefix string, res corev1.ResourceRequirements) *corev1.Pod {
	pod := busyboxPod(prefix, corev1.RestartPolicyNever, "exec sleep 3600")
	pod.Spec.Containers[0].Image = harness.BusyboxE2EImage
	pod.Spec.Containers[0].Resources = res
	return pod
}

// podCgroupRel is the pod's cgroup below a v1 hierarchy's mount, as the
// kubelet lays it out with the cgroupfs driver.
func podCgroupRel(p *corev1.Pod) string {
	parent := "kubepods"
	switch p.Status.QOSClass {
	case corev1.PodQOSBurstable:
		parent = "kubepods/burstable"
	case corev1.PodQOSBestEffort:
		parent = "kubepods/besteffort"
	}
	return filepath.Join(harness.CgroupRoot, parent, "pod"+string(p.UID))
}

// cgroupValue reads one cgroup v1 file, e.g. ("cpu", rel, "cpu.shares").
func cgroupValue(t *testing.T, controller, rel, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cgroupMount, controller, rel, file))
	if err != nil {
		t.Fatalf("read cgroup: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// cgroupProcs lists the processes in a v1 cgroup tree, with their command lines.
func cgroupProcs(t *testing.T, controller, rel string) map[int]string {
	t.Helper()
	out := map[int]string{}
	err := filepath.WalkDir(filepath.Join(cgroupMount, controller, rel), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			out[pid] = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk pod cgroup: %v", err)
	}
	return out
}

func requireCgroupV1(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cgroupMount, "cpu", "cpu.shares")); err != nil {
		t.Fatalf("this test reads cgroup v1 files: %v", err)
	}
}

// TestQoSCgroups: a Guaranteed, a Burstable and a BestEffort pod each get a pod cgroup
// in the right place of the kubepods hierarchy, with the kubelet's values; their
// containers run inside it with their class's OOM score; the cgroups go with the pods.
func TestQoSCgroups(t *testing.T) {
	t.Parallel()
	requireCgroupV1(t)
	guaranteed := createPod(t, sleepPod("qos-guaranteed", corev1.ResourceRequirements{
		Requests: rlist("cpu", "200m", "memory", "64Mi"), Limits: rlist("cpu", "200m", "memory", "64Mi")}))
	burstable := createPod(t, sleepPod("qos-burstable", corev1.ResourceRequirements{
		Requests: rlist("cpu", "100m", "memory", "32Mi"), Limits: rlist("cpu", "300m", "memory", "128Mi")}))
	besteffort := createPod(t, sleepPod("qos-besteffort", corev1.ResourceRequirements{}))

	node := getNode(t)
	memCapacity := node.Status.Capacity.Memory().Value()
	type want struct {
		class                 corev1.PodQOSClass
		shares, quota, memory string
		oomScoreAdj           int64
		pod                   *corev1.Pod
	}
	unlimited := "9223372036854771712"
	wants := []*want{
		{class: corev1.PodQOSGuaranteed, shares: "204", quota: "20000", memory: strconv.Itoa(64 << 20), oomScoreAdj: -997, pod: guaranteed},
		{class: corev1.PodQOSBurstable, shares: "102", quota: "30000", memory: strconv.Itoa(128 << 20),
			oomScoreAdj: min(max(1000-1000*(32<<20)/memCapacity, 3), 999), pod: burstable},
		{class: corev1.PodQOSBestEffort, shares: "2", quota: "-1", memory: unlimited, oomScoreAdj: 1000, pod: besteffort},
	}
	for _, w := range wants {
		w.pod = waitPod(t, w.pod, 2*time.Minute, runningAndReady)
		if w.pod.Status.QOSClass != w.class {
			t.Errorf("%s: qosClass %q, want %q", w.pod.Name, w.pod.Status.QOSClass, w.class)
		}
	}
	runtimeScore := containerdOOMScoreAdj(t)
	for _, w := range wants {
		rel := podCgroupRel(w.pod)
		for _, c := range []struct{ ctl, file, want string }{
			{"cpu", "cpu.shares", w.shares},
			{"cpu", "cpu.cfs_quota_us", w.quota},
			{"cpu", "cpu.cfs_period_us", "100000"},
			{"memory", "memory.limit_in_bytes", w.memory},
			{"pids", "pids.max", "max"},
		} {
			if got := cgroupValue(t, c.ctl, rel, c.file); got != c.want {
				t.Errorf("%s %s/%s = %s, want %s", w.class, rel, c.file, got, c.want)
			}
		}
		// The sandbox's pause and the container's sleep run in the pod cgroup, in
		// every hierarchy, with the class's OOM score.
		for _, ctl := range []string{"memory", "cpu", "pids"} {
			// A started container can still be runc's init for a moment, the
			// longer on a loaded machine for a BestEffort one (cpu.shares 2):
			// wait, with a deadline, for it to have become the sleep.
			var procs map[int]string
			var pause, sleep []int
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
				procs = cgroupProcs(t, ctl, rel)
				pause, sleep = nil, nil
				for pid, cmd := range procs {
					switch {
					case strings.HasSuffix(strings.Fields(cmd + " x")[0], "pause"):
						pause = append(pause, pid)
					case strings.HasPrefix(cmd, "sleep 3600"):
						sleep = append(sleep, pid)
					}
				}
				if len(pause) == 1 && len(sleep) == 1 || time.Now().After(deadline) {
					break
				}
			}
			if len(pause) != 1 || len(sleep) != 1 {
				t.Errorf("%s %s: processes %v, want the pause and the sleep", w.class, ctl, procs)
				continue
			}
			if ctl != "memory" {
				continue
			}
			// The container's own cgroup, inside the pod's, carries the
			// container's resources as the runtime was given them.
			ctr := containerCgroup(t, sleep[0], rel)
			for _, c := range []struct{ ctl, file, want string }{
				{"cpu", "cpu.shares", w.shares},
				{"cpu", "cpu.cfs_quota_us", w.quota},
				{"memory", "memory.limit_in_bytes", w.memory},
			} {
				if got := cgroupValue(t, c.ctl, ctr, c.file); got != c.want {
					t.Errorf("%s container %s/%s = %s, want %s", w.class, ctr, c.file, got, c.want)
				}
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", sleep[0]))
			if err != nil {
				t.Fatal(err)
			}
			// The harness's containerd restricts a container's score to no less
			// than its own (restrict_oom_score_adj), as it would for a rootless
			// runtime.
			want := max(w.oomScoreAdj, runtimeScore)
			if got := strings.TrimSpace(string(b)); got != strconv.FormatInt(want, 10) {
				t.Errorf("%s container oom_score_adj = %s, want %d", w.class, got, want)
			}
		}
	}

	kubepods := filepath.Join(harness.CgroupRoot, "kubepods")
	// The burstable QoS cgroup weighs as much as its pods ask for: at least this one.
	if got, _ := strconv.Atoi(cgroupValue(t, "cpu", kubepods+"/burstable", "cpu.shares")); got < 102 {
		t.Errorf("burstable cpu.shares = %d, want at least the burstable pod's 102", got)
	}
	if got := cgroupValue(t, "cpu", kubepods+"/besteffort", "cpu.shares"); got != "2" {
		t.Errorf("besteffort cpu.shares = %s, want 2", got)
	}
	// kubepods is bounded by node allocatable (enforceNodeAllocatable: pods): cpu
	// as allocatable has it; memory less reservations only, not the eviction
	// threshold, which the harness reserves nothing beside.
	if got, want := cgroupValue(t, "cpu", kubepods, "cpu.shares"), strconv.FormatInt(node.Status.Allocatable.Cpu().MilliValue()*1024/1000, 10); got != want {
		t.Errorf("kubepods cpu.shares = %s, want %s", got, want)
	}
	if got, want := cgroupValue(t, "memory", kubepods, "memory.limit_in_bytes"), strconv.FormatInt(memCapacity, 10); got != want {
		t.Errorf("kubepods memory limit = %s, want the node's %s", got, want)
	}

	// Deleted pods leave no cgroup behind, in any hierarchy.
	cs := framework.Client(t)
	for _, w := range wants {
		if err := cs.CoreV1().Pods(w.pod.Namespace).Delete(framework.Context(t, 30*time.Second), w.pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		for _, w := range wants {
			for _, ctl := range []string{"cpu", "cpuacct", "memory", "pids", "cpuset", "systemd", "unified", "freezer", "devices", "blkio"} {
				d := filepath.Join(cgroupMount, ctl, podCgroupRel(w.pod))
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("%s still there (%v)", d, err)
				}
			}
		}
		return nil
	})
}

// containerCgroup is the v1 memory cgroup of process pid, which must lie below podRel.
func containerCgroup(t *testing.T, pid int, podRel string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == "memory" {
			if !strings.HasPrefix(parts[2], podRel+"/") {
				t.Fatalf("process %d is in %s, not below the pod cgroup %s", pid, parts[2], podRel)
			}
			return parts[2]
		}
	}
	t.Fatalf("no memory cgroup for process %d:\n%s", pid, b)
	return ""
}

// containerdOOMScoreAdj is the harness containerd's own oom_score_adj.
func containerdOOMScoreAdj(t *testing.T) int64 {
	t.Helper()
	config := filepath.Join(framework.Cluster(t).RunDir, "containerd", "config.toml")
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		cmd, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), "--config\x00"+config) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "oom_score_adj"))
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Fatalf("no containerd running with %s", config)
	return 0
}

// boundPod binds the pod to the node itself, past the scheduler, as a user or a
// controller may: only the node's admission stands between it and running.
func boundPod(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.NodeName = harness.NodeName
	return pod
}

// TestAdmissionRejects: a pod bound to the node that cannot run there fails with the
// kubelet's reason and message, and nothing of it is created.
func TestAdmissionRejects(t *testing.T) {
	t.Parallel()
	allocatable := getNode(t).Status.Allocatable.Cpu().MilliValue()
	port := sleepPod("hostport-first", corev1.ResourceRequirements{})
	port.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 31987}}
	first := createPod(t, boundPod(port))
	waitPod(t, first, 2*time.Minute, runningAndReady)

	tests := []struct {
		name, reason, message string
		mutate                func(*corev1.Pod)
	}{
		{name: "more cpu than allocatable", reason: "OutOfcpu",
			message: fmt.Sprintf("Pod was rejected: Node didn't have enough resource: cpu, requested: %d, used: ", allocatable+1000),
			mutate: func(p *corev1.Pod) {
				q := *resource.NewMilliQuantity(allocatable+1000, resource.DecimalSI)
				p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: q}
			}},
		{name: "node selector", reason: "NodeAffinity",
			message: "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
			mutate:  func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"nodeagent.test/absent": "yes"} }},
		{name: "unsafe sysctl", reason: "SysctlForbidden",
			message: `Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted`,
			mutate: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}}
			}},
		{name: "host port taken", reason: "NodePorts",
			message: "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 31987}}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pod := sleepPod("rejected", corev1.ResourceRequirements{})
			tt.mutate(pod)
			pod = createPod(t, boundPod(pod))
			got := waitPod(t, pod, time.Minute, phaseIs(corev1.PodFailed))
			if got.Status.Reason != tt.reason || !strings.HasPrefix(got.Status.Message, tt.message) {
				t.Errorf("status reason %q message %q, want %q %q", got.Status.Reason, got.Status.Message, tt.reason, tt.message)
			}
			if sbs := sandboxesOf(t, string(got.UID)); len(sbs) != 0 {
				t.Errorf("a rejected pod got %d sandboxes", len(sbs))
			}
			framework.Eventually(t, 30*time.Second, func() error {
				if !hasEvent(podEvents(t, got), tt.reason, strings.TrimPrefix(tt.message, "Pod was rejected: ")) {
					return fmt.Errorf("no %s event:\n%s", tt.reason, eventSummary(podEvents(t, got)))
				}
				return nil
			})
		})
	}
}

// TestMemoryHogIsOOMKilled: a container past its memory limit is OOM-killed and
// reported so; a pod beside it keeps running untouched.
func TestMemoryHogIsOOMKilled(t *testing.T) {
	t.Parallel()
	neighbour := createPod(t, sleepPod("oom-neighbour", corev1.ResourceRequirements{
		Requests: rlist("memory", "16Mi"), Limits: rlist("memory", "32Mi")}))
	neighbour = waitPod(t, neighbour, 2*time.Minute, runningAndReady)

	// dd's buffer is as large as its block size, and filled from /dev/zero.
	hog := busyboxPod("oom-hog", corev1.RestartPolicyNever, "exec dd if=/dev/zero of=/dev/null bs=100M count=10")
	hog.Spec.Containers[0].Image = harness.BusyboxE2EImage
	hog.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rlist("memory", "32Mi"), Limits: rlist("memory", "32Mi")}
	hog = createPod(t, hog)
	got := waitPod(t, hog, 2*time.Minute, phaseIs(corev1.PodFailed))
	cs := got.Status.ContainerStatuses
	if len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.Reason != "OOMKilled" || cs[0].State.Terminated.ExitCode != 137 {
		t.Errorf("hog status %s, want terminated OOMKilled 137", describeStatuses(cs))
	}

	after, err := framework.Client(t).CoreV1().Pods(neighbour.Namespace).Get(context.Background(), neighbour.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := runningAndReady(after); err != nil {
		t.Errorf("neighbour: %v", err)
	}
	if c := after.Status.ContainerStatuses; len(c) != 1 || c[0].RestartCount != 0 || c[0].State.Running == nil ||
		!c[0].State.Running.StartedAt.Equal(&neighbour.Status.ContainerStatuses[0].State.Running.StartedAt) {
		t.Errorf("neighbour was disturbed: %s", describeStatuses(after.Status.ContainerStatuses))
	}
}

// TestAgentRestartKeepsAdmittedPods is not parallel: the agent dies and comes back.
// A pod it admitted keeps running; a pod bound while it was down that does not fit
// beside it is the one rejected, whatever order the restarted agent sees them in.
func TestAgentRestartKeepsAdmittedPods(t *testing.T) {
	requireNodeagent(t)
	cfg := framework.Cluster(t)
	ctx := framework.Context(t, 5*time.Minute)
	share := getNode(t).Status.Allocatable.Cpu().MilliValue() * 6 / 10
	cpu := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(share, resource.DecimalSI)}}
	first := createPod(t, boundPod(sleepPod("admitted", cpu)))
	first = waitPod(t, first, 2*time.Minute, runningAndReady)
	sandbox := sandboxesOf(t, string(first.UID))

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
	late := createPod(t, boundPod(sleepPod("late", cpu)))
	if err := cfg.StartAgent(ctx); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	got := waitPod(t, late, 2*time.Minute, phaseIs(corev1.PodFailed))
	if got.Status.Reason != "OutOfcpu" {
		t.Errorf("late pod: reason %q message %q, want OutOfcpu", got.Status.Reason, got.Status.Message)
	}
	after := waitPod(t, first, time.Minute, runningAndReady)
	if cs := after.Status.ContainerStatuses; len(cs) != 1 || cs[0].RestartCount != 0 || cs[0].ContainerID != first.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("the admitted pod was disturbed: %s", describeStatuses(cs))
	}
	if sbs := sandboxesOf(t, string(first.UID)); len(sbs) != 1 || len(sandbox) != 1 || sbs[0].Id != sandbox[0].Id {
		t.Errorf("the admitted pod's sandbox changed")
	}
}

// TestPodCgroupsDoNotLeak: many pods come and go, some finishing on their own and
// some deleted while running; none leaves a pod cgroup behind.
func TestPodCgroupsDoNotLeak(t *testing.T) {
	t.Parallel()
	requireCgroupV1(t)
	const rounds, perRound = 10, 10
	cs := framework.Client(t)
	var all []*corev1.Pod
	for r := range rounds {
		var round []*corev1.Pod
		for i := range perRound {
			var pod *corev1.Pod
			res := corev1.ResourceRequirements{}
			if i%3 == 0 {
				res = corev1.ResourceRequirements{Requests: rlist("cpu", "10m", "memory", "8Mi"), Limits: rlist("cpu", "10m", "memory", "8Mi")}
			} else if i%3 == 1 {
				res = corev1.ResourceRequirements{Requests: rlist("cpu", "10m")}
			}
			if i%2 == 0 {
				pod = busyboxPod(fmt.Sprintf("cycle%d", r), corev1.RestartPolicyNever, "true")
				pod.Spec.Containers[0].Resources = res
			} else {
				pod = sleepPod(fmt.Sprintf("cycle%d", r), res)
			}
			round = append(round, createPod(t, pod))
		}
		for i, pod := range round {
			if i%2 == 0 {
				waitPod(t, pod, 2*time.Minute, phaseIs(corev1.PodSucceeded))
			} else {
				waitPod(t, pod, 2*time.Minute, runningAndReady)
			}
		}
		for _, pod := range round {
			zero := int64(0)
			if err := cs.CoreV1().Pods(pod.Namespace).Delete(shortCtx(t), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatal(err)
			}
		}
		all = append(all, round...)
	}
	framework.Eventually(t, 3*time.Minute, func() error {
		for _, pod := range all {
			for _, parent := range []string{"kubepods", "kubepods/burstable", "kubepods/besteffort"} {
				for _, ctl := range []string{"cpu", "memory", "pids", "cpuset", "systemd", "unified"} {
					d := filepath.Join(cgroupMount, ctl, harness.CgroupRoot, parent, "pod"+string(pod.UID))
					if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
						return fmt.Errorf("%s still there (%v)", d, err)
					}
				}
			}
		}
		return nil
	})
}

func shortCtx(t *testing.T) context.Context { return framework.Context(t, 30*time.Second) }
