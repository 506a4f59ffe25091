//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

const mib = 1 << 20

// nodeProxy reads a path of the node's API through the apiserver's node
// proxy, as metrics-server and kubectl do.
func nodeProxy(path string) []string {
	return []string{"get", "--raw", "/api/v1/nodes/" + harness.NodeName + "/proxy" + path}
}

func getSummary(t *testing.T, query string) (*statsapi.Summary, error) {
	t.Helper()
	out, err := framework.KubectlErr(t, nodeProxy("/stats/summary"+query)...)
	if err != nil {
		return nil, err
	}
	var s statsapi.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return nil, fmt.Errorf("decode summary: %w: %.300s", err, out)
	}
	return &s, nil
}

// samples parses a Prometheus text exposition into samples by name; a
// histogram's come as <name>_bucket, <name>_sum and <name>_count.
func samples(text string) (map[string]model.Vector, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	out := map[string]model.Vector{}
	for _, fam := range fams {
		vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, fam)
		if err != nil {
			return nil, err
		}
		for _, s := range vec {
			name := string(s.Metric[model.MetricNameLabel])
			out[name] = append(out[name], s)
		}
	}
	return out, nil
}

// sampleOf finds the sample of name whose labels include all of labels.
func sampleOf(m map[string]model.Vector, name string, labels map[string]string) (*model.Sample, error) {
	for _, s := range m[name] {
		ok := true
		for k, v := range labels {
			ok = ok && string(s.Metric[model.LabelName(k)]) == v
		}
		if ok {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no %s%v among %d samples", name, labels, len(m[name]))
}

func podStatsOf(s *statsapi.Summary, ns, name string) *statsapi.PodStats {
	for i := range s.Pods {
		if s.Pods[i].PodRef.Namespace == ns && s.Pods[i].PodRef.Name == name {
			return &s.Pods[i]
		}
	}
	return nil
}

func containerStatsOf(p *statsapi.PodStats, name string) *statsapi.ContainerStats {
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i]
		}
	}
	return nil
}

func volumeStatsOf(p *statsapi.PodStats, name string) *statsapi.VolumeStats {
	for i := range p.VolumeStats {
		if p.VolumeStats[i].Name == name {
			return &p.VolumeStats[i]
		}
	}
	return nil
}

func num(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

// statsPods starts a pod burning CPU under a 200m limit, probed for
// readiness, and a pod holding 48 MiB in a memory-backed emptyDir, with
// 1 MiB in a disk one; both are running when it returns.
func statsPods(t *testing.T, ns string) (burner, holder *corev1.Pod) {
	t.Helper()
	burn := busyboxPod("burn", corev1.RestartPolicyAlways, "echo burning; while :; do :; done")
	burn.Namespace = ns
	c := &burn.Spec.Containers[0]
	c.Name = "burn"
	c.Resources = corev1.ResourceRequirements{Requests: rlist("cpu", "200m", "memory", "32Mi"), Limits: rlist("cpu", "200m", "memory", "32Mi")}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}

	hold := busyboxPod("hold", corev1.RestartPolicyAlways,
		"dd if=/dev/zero of=/fill/data bs=1M count=48 && dd if=/dev/zero of=/scratch/data bs=1M count=1 && echo filled && exec sleep 3600")
	hold.Namespace = ns
	hold.Spec.Containers[0].Name = "fill"
	hold.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "fill", MountPath: "/fill"}, {Name: "scratch", MountPath: "/scratch"}}
	hold.Spec.Volumes = []corev1.Volume{
		{Name: "fill", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	burner, holder = createPod(t, burn), createPod(t, hold)
	waitPod(t, burner, 2*time.Minute, runningAndReady)
	waitPod(t, holder, 2*time.Minute, phaseIs(corev1.PodRunning))
	return burner, holder
}

// TestStatsSummaryShowsPodsAndNode reads /stats/summary through the
// apiserver while a pod burns CPU and another holds memory, and checks
// what metrics-server and kubectl top read: CPU rates, working sets, the
// node's own figures, filesystems and volumes.
func TestStatsSummaryShowsPodsAndNode(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	ns := newNamespace(t, "stats")
	burner, holder := statsPods(t, ns)

	framework.Eventually(t, 2*time.Minute, func() error {
		s, err := getSummary(t, "")
		if err != nil {
			return err
		}
		n := s.Node
		if n.NodeName != harness.NodeName || n.StartTime.IsZero() {
			return fmt.Errorf("node %q started %v", n.NodeName, n.StartTime)
		}
		if n.CPU == nil || num(n.CPU.UsageNanoCores) == 0 || num(n.CPU.UsageCoreNanoSeconds) == 0 {
			return fmt.Errorf("node cpu = %+v", n.CPU)
		}
		// The burner alone takes 200m.
		if v := num(n.CPU.UsageNanoCores); v < 150_000_000 {
			return fmt.Errorf("node uses %d nanocores while a pod burns 200m", v)
		}
		if n.Memory == nil || num(n.Memory.WorkingSetBytes) < 48*mib || num(n.Memory.AvailableBytes) == 0 || num(n.Memory.UsageBytes) < num(n.Memory.WorkingSetBytes) {
			return fmt.Errorf("node memory = %+v", n.Memory)
		}
		if n.Fs == nil || num(n.Fs.CapacityBytes) == 0 || num(n.Fs.UsedBytes) == 0 || n.Fs.InodesFree == nil {
			return fmt.Errorf("node fs = %+v", n.Fs)
		}
		if n.Runtime == nil || n.Runtime.ImageFs == nil || num(n.Runtime.ImageFs.UsedBytes) == 0 || num(n.Runtime.ImageFs.CapacityBytes) == 0 {
			return fmt.Errorf("node runtime fs = %+v", n.Runtime)
		}
		if n.Network == nil || len(n.Network.Interfaces) == 0 {
			return fmt.Errorf("node network = %+v", n.Network)
		}
		if n.Rlimit == nil || num64(n.Rlimit.MaxPID) == 0 || num64(n.Rlimit.NumOfRunningProcesses) == 0 {
			return fmt.Errorf("node rlimit = %+v", n.Rlimit)
		}
		sys := map[string]bool{}
		for _, c := range n.SystemContainers {
			sys[c.Name] = c.CPU != nil && c.Memory != nil && num(c.Memory.WorkingSetBytes) > 0
		}
		if !sys[statsapi.SystemContainerPods] {
			return fmt.Errorf("system containers %+v lack pods", n.SystemContainers)
		}

		b := podStatsOf(s, ns, burner.Name)
		if b == nil {
			return fmt.Errorf("pod %s not in the summary", burner.Name)
		}
		if b.PodRef.UID != string(burner.UID) || b.StartTime.IsZero() {
			return fmt.Errorf("burner ref %+v start %v", b.PodRef, b.StartTime)
		}
		if v := num(b.CPU.UsageNanoCores); v < 100_000_000 || v > 300_000_000 {
			return fmt.Errorf("burner pod uses %d nanocores, want about its 200m limit", v)
		}
		bc := containerStatsOf(b, "burn")
		if bc == nil || bc.CPU == nil || num(bc.CPU.UsageNanoCores) < 100_000_000 || num(bc.CPU.UsageCoreNanoSeconds) == 0 {
			return fmt.Errorf("burn container = %+v", bc)
		}
		if bc.Rootfs == nil || bc.Rootfs.UsedBytes == nil || num(bc.Rootfs.CapacityBytes) == 0 || bc.Logs == nil || num(bc.Logs.UsedBytes) == 0 {
			return fmt.Errorf("burn container rootfs %+v logs %+v", bc.Rootfs, bc.Logs)
		}
		if b.Network == nil || b.Network.Name != "eth0" {
			return fmt.Errorf("burner network = %+v, want the sandbox's eth0", b.Network)
		}

		h := podStatsOf(s, ns, holder.Name)
		if h == nil {
			return fmt.Errorf("pod %s not in the summary", holder.Name)
		}
		hc := containerStatsOf(h, "fill")
		if hc == nil || hc.Memory == nil {
			return fmt.Errorf("fill container = %+v", hc)
		}
		// 48 MiB written to tmpfs is charged to the container, and is no
		// inactive file cache: it is in the working set.
		if ws := num(hc.Memory.WorkingSetBytes); ws < 48*mib || ws > 96*mib {
			return fmt.Errorf("fill container working set %d MiB, want 48 to 96", ws/mib)
		}
		if ws := num(h.Memory.WorkingSetBytes); ws < 48*mib || ws > 112*mib {
			return fmt.Errorf("holder pod working set %d MiB, want 48 to 112", ws/mib)
		}
		fill, scratch := volumeStatsOf(h, "fill"), volumeStatsOf(h, "scratch")
		if fill == nil || scratch == nil {
			return fmt.Errorf("holder volumes = %+v", h.VolumeStats)
		}
		if u := num(fill.UsedBytes); u < 48*mib || u > 49*mib || num(fill.CapacityBytes) == 0 {
			return fmt.Errorf("fill volume uses %d bytes, want 48 MiB", u)
		}
		if u := num(scratch.UsedBytes); u < mib || u > 2*mib {
			return fmt.Errorf("scratch volume uses %d bytes, want 1 MiB", u)
		}
		if e := h.EphemeralStorage; e == nil || num(e.UsedBytes) < num(fill.UsedBytes)+num(scratch.UsedBytes) || num(e.CapacityBytes) == 0 {
			return fmt.Errorf("holder ephemeral storage = %+v", e)
		}
		return nil
	})

	// The cheaper variant metrics-server may ask for: CPU and memory only.
	framework.Eventually(t, time.Minute, func() error {
		s, err := getSummary(t, "?only_cpu_and_memory=true")
		if err != nil {
			return err
		}
		if s.Node.CPU == nil || s.Node.Memory == nil || s.Node.Fs != nil || s.Node.Network != nil {
			return fmt.Errorf("node = %+v, want cpu and memory only", s.Node)
		}
		b := podStatsOf(s, ns, burner.Name)
		if b == nil || b.CPU == nil || b.Memory == nil || b.VolumeStats != nil || b.Network != nil || containerStatsOf(b, "burn") == nil {
			return fmt.Errorf("burner = %+v, want cpu and memory only", b)
		}
		return nil
	})
}

func num64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// TestResourceMetricsAndAgentMetrics scrapes /metrics/resource as
// metrics-server does, and /metrics and /metrics/probes, and checks them
// against the pods that run.
func TestResourceMetricsAndAgentMetrics(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	ns := newNamespace(t, "metrics")
	burner, holder := statsPods(t, ns)
	// A pod whose image never existed makes the runtime refuse a pull: the
	// errors counter shows only operations that have failed.
	unpullable := busyboxPod("unpullable", corev1.RestartPolicyAlways, "true")
	unpullable.Namespace = ns
	unpullable.Spec.Containers[0].Image = harness.RegistryAddr + "/nodeagent/never-existed:metrics"
	waitPod(t, createPod(t, unpullable), 2*time.Minute, func(p *corev1.Pod) error {
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				return nil
			}
		}
		return fmt.Errorf("containers %+v, want a pull refused", p.Status.ContainerStatuses)
	})

	framework.Eventually(t, 2*time.Minute, func() error {
		out, err := framework.KubectlErr(t, nodeProxy("/metrics/resource")...)
		if err != nil {
			return err
		}
		m, err := samples(out)
		if err != nil {
			return fmt.Errorf("parse /metrics/resource: %w", err)
		}
		for _, name := range []string{"scrape_error", "resource_scrape_error"} {
			if s, err := sampleOf(m, name, nil); err != nil || s.Value != 0 {
				return fmt.Errorf("%s = %v, %v", name, s, err)
			}
		}
		if s, err := sampleOf(m, "node_cpu_usage_seconds_total", nil); err != nil || s.Value <= 0 || s.Timestamp == 0 {
			return fmt.Errorf("node cpu = %v, %v", s, err)
		}
		if s, err := sampleOf(m, "node_memory_working_set_bytes", nil); err != nil || s.Value < 48*mib {
			return fmt.Errorf("node memory = %v, %v", s, err)
		}
		burn := map[string]string{"container": "burn", "pod": burner.Name, "namespace": ns}
		if s, err := sampleOf(m, "container_cpu_usage_seconds_total", burn); err != nil || s.Value <= 0 {
			return fmt.Errorf("burn cpu = %v, %v", s, err)
		}
		if s, err := sampleOf(m, "container_start_time_seconds", burn); err != nil ||
			float64(s.Value) < float64(burner.CreationTimestamp.Unix()-1) || float64(s.Value) > float64(time.Now().Unix()) {
			return fmt.Errorf("burn start time = %v (pod created %v), %v", s, burner.CreationTimestamp, err)
		}
		fill := map[string]string{"container": "fill", "pod": holder.Name, "namespace": ns}
		if s, err := sampleOf(m, "container_memory_working_set_bytes", fill); err != nil || s.Value < 48*mib || s.Value > 96*mib {
			return fmt.Errorf("fill working set = %v, %v", s, err)
		}
		if s, err := sampleOf(m, "pod_cpu_usage_seconds_total", map[string]string{"pod": burner.Name, "namespace": ns}); err != nil || s.Value <= 0 {
			return fmt.Errorf("burner pod cpu = %v, %v", s, err)
		}
		if s, err := sampleOf(m, "pod_memory_working_set_bytes", map[string]string{"pod": holder.Name, "namespace": ns}); err != nil || s.Value < 48*mib {
			return fmt.Errorf("holder pod memory = %v, %v", s, err)
		}
		return nil
	})

	// The agent's own metrics agree with what the runtime runs.
	rt, _ := framework.CRI(t)
	readySandboxes := func() (int, error) {
		resp, err := rt.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}})
		if err != nil {
			return 0, err
		}
		return len(resp.GetItems()), nil
	}
	framework.Eventually(t, time.Minute, func() error {
		before, err := readySandboxes()
		if err != nil {
			return err
		}
		out, err := framework.KubectlErr(t, nodeProxy("/metrics")...)
		if err != nil {
			return err
		}
		after, err := readySandboxes()
		if err != nil {
			return err
		}
		m, err := samples(out)
		if err != nil {
			return fmt.Errorf("parse /metrics: %w", err)
		}
		s, err := sampleOf(m, "kubelet_running_pods", nil)
		if err != nil {
			return err
		}
		// Other tests start and stop pods meanwhile: the gauge must lie
		// between the runtime's counts just before and after the scrape.
		if v := int(s.Value); v < min(before, after) || v > max(before, after) || v < 2 {
			return fmt.Errorf("kubelet_running_pods = %d, the runtime has %d then %d ready sandboxes", v, before, after)
		}
		if s, err := sampleOf(m, "kubelet_running_containers", map[string]string{"container_state": "running"}); err != nil || s.Value < 2 {
			return fmt.Errorf("running containers = %v, %v", s, err)
		}
		if s, err := sampleOf(m, "kubelet_pod_start_duration_seconds_count", nil); err != nil || s.Value < 2 {
			return fmt.Errorf("pod start durations = %v, %v; want at least these two pods", s, err)
		}
		if s, err := sampleOf(m, "kubelet_pod_start_sli_duration_seconds_count", nil); err != nil || s.Value < 1 {
			return fmt.Errorf("pod start SLI durations = %v, %v", s, err)
		}
		for _, name := range []string{"kubelet_pleg_relist_duration_seconds_count", "kubelet_pod_worker_duration_seconds_count"} {
			if s, err := sampleOf(m, name, nil); err != nil || s.Value == 0 {
				return fmt.Errorf("%s = %v, %v", name, s, err)
			}
		}
		for _, op := range []string{"list_podsandbox", "run_podsandbox", "start_container", "list_podsandbox_stats"} {
			if s, err := sampleOf(m, "kubelet_runtime_operations_total", map[string]string{"operation_type": op}); err != nil || s.Value == 0 {
				return fmt.Errorf("runtime operations %s = %v, %v", op, s, err)
			}
		}
		if s, err := sampleOf(m, "kubelet_runtime_operations_errors_total", map[string]string{"operation_type": "pull_image"}); err != nil || s.Value == 0 {
			return fmt.Errorf("runtime operation errors pull_image = %v, %v", s, err)
		}
		if s, err := sampleOf(m, "rest_client_requests_total", map[string]string{"method": "PATCH", "code": "200"}); err != nil || s.Value == 0 {
			return fmt.Errorf("rest client PATCHes = %v, %v", s, err)
		}
		return nil
	})

	// The burner's readiness probe runs every second.
	framework.Eventually(t, time.Minute, func() error {
		out, err := framework.KubectlErr(t, nodeProxy("/metrics/probes")...)
		if err != nil {
			return err
		}
		m, err := samples(out)
		if err != nil {
			return err
		}
		s, err := sampleOf(m, "prober_probe_total", map[string]string{"probe_type": "Readiness", "result": "successful",
			"container": "burn", "pod": burner.Name, "namespace": ns, "pod_uid": string(burner.UID)})
		if err != nil || s.Value < 2 {
			return fmt.Errorf("readiness probe runs = %v, %v", s, err)
		}
		return nil
	})
}

// TestConfigzAndPprof: /configz shows the effective configuration under
// "kubeletconfig", and the profiler answers (enableProfilingHandler
// defaults to true), both through the apiserver's proxy.
func TestConfigzAndPprof(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	var cz struct {
		KubeletConfig struct {
			Kind                   string `json:"kind"`
			APIVersion             string `json:"apiVersion"`
			Port                   int32  `json:"port"`
			MaxPods                int32  `json:"maxPods"`
			EnableProfilingHandler *bool  `json:"enableProfilingHandler"`
			CgroupRoot             string `json:"cgroupRoot"`
		} `json:"kubeletconfig"`
	}
	out := framework.Kubectl(t, nodeProxy("/configz")...)
	if err := json.Unmarshal([]byte(out), &cz); err != nil {
		t.Fatalf("decode /configz: %v: %.300s", err, out)
	}
	kc := cz.KubeletConfig
	if kc.Kind != "KubeletConfiguration" || kc.APIVersion != "kubelet.config.k8s.io/v1beta1" || kc.Port != 10250 || kc.MaxPods == 0 ||
		kc.EnableProfilingHandler == nil || !*kc.EnableProfilingHandler || kc.CgroupRoot != harness.CgroupRoot {
		t.Errorf("configz = %+v", kc)
	}
	if out := framework.Kubectl(t, nodeProxy("/debug/pprof/")...); !strings.Contains(out, "goroutine") {
		t.Errorf("pprof index = %.300s", out)
	}
	if out := framework.Kubectl(t, nodeProxy("/debug/pprof/goroutine?debug=1")...); !strings.Contains(out, "goroutine profile:") {
		t.Errorf("goroutine profile = %.300s", out)
	}
}

// TestStatsAndMetricsAuthorization: /stats is nodes/stats and /metrics
// nodes/metrics, as on the kubelet, so monitoring can be given one
// without the other, nor nodes/proxy.
func TestStatsAndMetricsAuthorization(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 2*time.Minute)
	ns := newNamespace(t, "statsauthz")
	sa, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "nodes-metrics-"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tok.Status.Token
	framework.Eventually(t, time.Minute, func() error {
		if code, body := nodeGet(t, "/metrics/resource", token); code != http.StatusOK || !strings.Contains(body, "node_cpu_usage_seconds_total") {
			return fmt.Errorf("GET /metrics/resource with nodes/metrics: %d %.200s", code, body)
		}
		return nil
	})
	if code, body := nodeGet(t, "/stats/summary", token); code != http.StatusForbidden || !strings.Contains(body, "subresource(s)=[stats]") {
		t.Errorf("GET /stats/summary with nodes/metrics only: %d %.300s, want 403 for nodes/stats", code, body)
	}
	if code, body := nodeGet(t, "/debug/pprof/", token); code != http.StatusForbidden || !strings.Contains(body, "proxy") {
		t.Errorf("GET /debug/pprof/ with nodes/metrics only: %d %.300s, want 403 for nodes/proxy", code, body)
	}
}
