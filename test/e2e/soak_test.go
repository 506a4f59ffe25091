//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// soakCycles is how many pods TestSoak creates and deletes: SOAK_CYCLES, or a smoke's 24
// (`make soak` runs 1000).
func soakCycles(t *testing.T) int {
	if v := os.Getenv("SOAK_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SOAK_CYCLES=%q: want a positive number", v)
		}
		return n
	}
	return 24
}

// TestSoak is not parallel: it counts what the whole node holds. Pods with every kind of
// volume the agent sets up (configMap, secret, emptyDir, a projected service account token
// and downward API), a readiness and a liveness probe, a postStart and a preStop hook are
// created, run until Ready and deleted, SOAK_CYCLES of them, 8 at a time. Afterwards the node
// holds what it held before: no mount, pod cgroup, pod directory, log directory, pod IP or
// network namespace more, and the agent's memory after the run is within noise of its
// memory after the first tenth (its working set warmed up).
func TestSoak(t *testing.T) {
	requireNodeagent(t)
	cycles := soakCycles(t)
	ctx := framework.Context(t, time.Duration(cycles)*2*time.Second+10*time.Minute)
	cfg := framework.Cluster(t)
	cs := framework.Client(t)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	cm, err := cs.CoreV1().ConfigMaps(podNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "soak-" + run},
		Data: map[string]string{"setting": "on"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := cs.CoreV1().Secrets(podNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "soak-" + run},
		StringData: map[string]string{"password": "soak"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ConfigMaps(podNS).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
		_ = cs.CoreV1().Secrets(podNS).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})
	before := soakState(t, cfg, nil)

	var (
		next     atomic.Int64
		mu       sync.Mutex
		uids     []types.UID
		warmRSS  int64
		failures []string
	)
	warmAt := int64(max(cycles/10, 1))
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(cycles) || ctx.Err() != nil {
					return
				}
				uid, err := soakCycle(ctx, cs, soakPod(cm.Name, secret.Name))
				mu.Lock()
				if uid != "" {
					uids = append(uids, uid)
				}
				if err != nil {
					failures = append(failures, err.Error())
				}
				if i == warmAt {
					warmRSS = agentRSS(t, cfg)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(failures) > 0 {
		t.Fatalf("%d cycles failed; first: %s", len(failures), failures[0])
	}

	// The agent's container GC removes the log directories of gone pods within a minute
	// or two; everything else goes with the pod.
	var after map[string][]string
	framework.Eventually(t, 3*time.Minute, func() error {
		after = soakState(t, cfg, uids)
		var grown []string
		for _, kind := range []string{"mounts", "netns", "pod IPs"} {
			if len(after[kind]) > len(before[kind]) {
				grown = append(grown, fmt.Sprintf("%s %d → %d", kind, len(before[kind]), len(after[kind])))
			}
		}
		for _, kind := range []string{"pod cgroups", "pod dirs", "log dirs", "pod mounts"} {
			if len(after[kind]) > 0 {
				grown = append(grown, fmt.Sprintf("%s of the soak's pods: %s", kind, strings.Join(after[kind][:min(3, len(after[kind]))], ", ")))
			}
		}
		if len(grown) > 0 {
			return fmt.Errorf("left after %d cycles: %s", cycles, strings.Join(grown, "; "))
		}
		return nil
	})
	endRSS := agentRSS(t, cfg)
	t.Logf("soak: %d cycles in %s (%.1f pods/s, 8 at a time); agent RSS %d MiB after %d cycles, %d MiB at the end; mounts %d, netns %d, pod IPs %d before and after",
		cycles, elapsed.Round(time.Second), float64(cycles)/elapsed.Seconds(), warmRSS>>20, warmAt, endRSS>>20,
		len(before["mounts"]), len(before["netns"]), len(before["pod IPs"]))
	if endRSS > warmRSS+warmRSS/4+16<<20 {
		t.Errorf("agent RSS grew from %d MiB (after %d cycles) to %d MiB (after %d)", warmRSS>>20, warmAt, endRSS>>20, cycles)
	}
}

// soakPod is the pod of one soak cycle.
func soakPod(configMap, secret string) *corev1.Pod {
	pod := busyboxPod("soak", corev1.RestartPolicyAlways, "touch /tmp/ready; exec sleep 3600")
	grace := int64(2)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	expiry := int64(3600)
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}},
		{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &expiry}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
		}}}},
	}
	c := &pod.Spec.Containers[0]
	for _, v := range pod.Spec.Volumes {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/ready"}}}, PeriodSeconds: 1}
	c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/config/setting"}}}, PeriodSeconds: 5}
	c.Lifecycle = &corev1.Lifecycle{
		PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"touch", "/scratch/started"}}},
		PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/scratch/started"}}},
	}
	return pod
}

// soakCycle creates the pod, waits for it to be Ready, deletes it and waits for it to be
// gone from the apiserver; it returns the pod's UID once created.
func soakCycle(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (types.UID, error) {
	pods := cs.CoreV1().Pods(pod.Namespace)
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	wait := func(what string, done func() (bool, error)) error {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ok, err := done()
			if err != nil || ok {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pod %s: not %s within 2m", created.Name, what)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	err = wait("Ready", func() (bool, error) {
		p, err := pods.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				return false, fmt.Errorf("pod %s: container restarted: %s", p.Name, describeStatuses(p.Status.ContainerStatuses))
			}
		}
		return runningAndReady(p) == nil, nil
	})
	if err == nil {
		err = pods.Delete(ctx, created.Name, metav1.DeleteOptions{})
	}
	if err != nil {
		zero := int64(0)
		_ = pods.Delete(context.Background(), created.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		return created.UID, err
	}
	return created.UID, wait("gone", func() (bool, error) {
		_, err := pods.Get(ctx, created.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// soakState is what pods leave on the node if something leaks: counts of the mounts under
// the run dir, the runtime's network namespaces and the pod IPs held, and, of the pods with
// the given UIDs, their cgroups, pod directories, log directories and mounts.
func soakState(t *testing.T, cfg *harness.Config, uids []types.UID) map[string][]string {
	t.Helper()
	m, err := framework.ReadMachineState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := map[string][]string{}
	ofPods := func(kind, path string) {
		for _, uid := range uids {
			if strings.Contains(path, string(uid)) {
				s[kind] = append(s[kind], path)
			}
		}
	}
	for _, mnt := range m.Mounts {
		if strings.Contains(mnt, "/netns/") {
			s["netns"] = append(s["netns"], mnt)
		}
		s["mounts"] = append(s["mounts"], mnt)
		ofPods("pod mounts", mnt)
	}
	_ = filepath.WalkDir(cfg.PodIPAMDir(), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), "last_reserved_ip") && d.Name() != "lock" {
			s["pod IPs"] = append(s["pod IPs"], path)
		}
		return nil
	})
	if len(uids) == 0 {
		return s
	}
	for _, hier := range []string{"memory", "cpu", "pids"} {
		_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup", hier, harness.CgroupRoot), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				ofPods("pod cgroups", path)
			}
			return nil
		})
	}
	dirs, _ := os.ReadDir(filepath.Join(cfg.AgentRootDir(), "pods"))
	for _, d := range dirs {
		ofPods("pod dirs", d.Name())
	}
	logs, _ := os.ReadDir("/var/log/pods")
	for _, d := range logs {
		ofPods("log dirs", d.Name())
	}
	return s
}

// agentRSS is the agent's resident memory.
func agentRSS(t *testing.T, cfg *harness.Config) int64 {
	pid := cfg.Pids()["agent"]
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("agent (pid %d): %v", pid, err)
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
