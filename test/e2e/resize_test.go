//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// resizable is a busybox container that sleeps, with cpu and memory
// requests equal to limits, and a resize policy per resource.
func resizable(name, cpu, mem string, memPolicy corev1.ResourceResizeRestartPolicy) corev1.Container {
	c := sleeper(name)
	c.Image = harness.BusyboxE2EImage
	c.Resources = corev1.ResourceRequirements{Requests: rlist("cpu", cpu, "memory", mem), Limits: rlist("cpu", cpu, "memory", mem)}
	c.ResizePolicy = []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: memPolicy},
	}
	return c
}

// resizePod patches the pod's containers' cpu and memory (requests and
// limits alike) through the resize subresource, as kubectl --subresource
// resize does.
func resizePod(t *testing.T, pod *corev1.Pod, sizes map[string][2]string) *corev1.Pod {
	t.Helper()
	type ctr struct {
		Name      string                      `json:"name"`
		Resources corev1.ResourceRequirements `json:"resources"`
	}
	// In the pod's order: a strategic merge patch's list may reorder the
	// containers, which a resize may not.
	var cs []ctr
	for _, c := range pod.Spec.Containers {
		s, ok := sizes[c.Name]
		if !ok {
			continue
		}
		l := rlist("cpu", s[0], "memory", s[1])
		cs = append(cs, ctr{Name: c.Name, Resources: corev1.ResourceRequirements{Requests: l, Limits: l}})
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"containers": cs}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := framework.Client(t).CoreV1().Pods(pod.Namespace).Patch(framework.Context(t, 30*time.Second), pod.Name,
		types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "resize")
	if err != nil {
		t.Fatalf("resize %s: %v", pod.Name, err)
	}
	return got
}

// resized waits until the pod's status caught up with its generation and
// carries no resize condition, with its containers' status resources as
// sizes says.
func resized(generation int64, sizes map[string][2]string) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		if p.Status.ObservedGeneration < generation {
			return fmt.Errorf("observedGeneration %d, want %d", p.Status.ObservedGeneration, generation)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress {
				return fmt.Errorf("condition %s %s: %s", c.Type, c.Reason, c.Message)
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			want, ok := sizes[cs.Name]
			if !ok {
				continue
			}
			if cs.Resources == nil || !cs.Resources.Limits.Cpu().Equal(resource.MustParse(want[0])) ||
				!cs.Resources.Limits.Memory().Equal(resource.MustParse(want[1])) ||
				!cs.AllocatedResources.Cpu().Equal(resource.MustParse(want[0])) {
				return fmt.Errorf("container %s: resources %v allocated %v, want %v", cs.Name, cs.Resources, cs.AllocatedResources, want)
			}
		}
		return runningAndReady(p)
	}
}

// cgroupOf reads one of the container's own cgroup v1 files from inside it.
func cgroupOf(t *testing.T, pod *corev1.Pod, container, file string) string {
	t.Helper()
	return strings.TrimSpace(mustExec(t, pod, container, "cat", "/sys/fs/cgroup/"+file))
}

func restartsOf(p *corev1.Pod) map[string]int32 {
	out := map[string]int32{}
	for _, cs := range p.Status.ContainerStatuses {
		out[cs.Name] = cs.RestartCount
	}
	return out
}

// TestResizeInPlace: cpu and memory of a running container change in place
// (its cgroup shows it, nothing restarts); a container whose memory resize
// policy is RestartContainer is restarted, and only it; a resize the node
// has no room for waits Deferred, and taking it back clears it.
func TestResizeInPlace(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "resize-", Namespace: podNS},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			resizable("inplace", "100m", "64Mi", corev1.NotRequired),
			resizable("restart", "100m", "64Mi", corev1.RestartContainer),
		}},
	}
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)
	if cs := pod.Status.ContainerStatuses; len(cs) != 2 || cs[0].Resources == nil || cs[0].AllocatedResources == nil {
		t.Fatalf("a running pod reports no resources (the apiserver refuses resizes then): %+v", cs)
	}

	sizes := map[string][2]string{"inplace": {"300m", "128Mi"}, "restart": {"200m", "96Mi"}}
	got := resizePod(t, pod, sizes)
	got = waitPod(t, got, 2*time.Minute, resized(got.Generation, sizes))
	if r := restartsOf(got); r["inplace"] != 0 || r["restart"] != 1 {
		t.Errorf("restart counts after the resize = %v, want inplace 0 and restart 1", r)
	}
	for _, c := range []struct{ container, file, want string }{
		{"inplace", "cpu/cpu.cfs_quota_us", "30000"},
		{"inplace", "cpu/cpu.shares", "307"},
		{"inplace", "memory/memory.limit_in_bytes", "134217728"},
		{"restart", "cpu/cpu.cfs_quota_us", "20000"},
		{"restart", "memory/memory.limit_in_bytes", "100663296"},
	} {
		if got := cgroupOf(t, pod, c.container, c.file); got != c.want {
			t.Errorf("%s %s = %s, want %s", c.container, c.file, got, c.want)
		}
	}
	// The pod's own cgroup follows the sum.
	if got := cgroupValue(t, "memory", podCgroupRel(got), "memory.limit_in_bytes"); got != "234881024" {
		t.Errorf("pod cgroup memory limit = %s, want 224Mi", got)
	}
	for _, want := range []string{"ResizeStarted", "ResizeCompleted"} {
		if !hasEvent(podEvents(t, got), want, fmt.Sprintf(`"generation":%d`, got.Generation)) {
			t.Errorf("no %s event for generation %d: %s", want, got.Generation, eventSummary(podEvents(t, got)))
		}
	}

	// The pod asking for as much cpu as the node has in all: the apiserver
	// lets it through, the node has given some of it to others (a filler
	// makes sure), so it waits.
	filler := sleepPod("resize-filler", corev1.ResourceRequirements{Requests: rlist("cpu", "100m")})
	waitPod(t, createPod(t, filler), 2*time.Minute, runningAndReady)
	node, err := framework.Client(t).CoreV1().Nodes().Get(framework.Context(t, 30*time.Second), got.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all := resource.NewMilliQuantity(node.Status.Allocatable.Cpu().MilliValue()-200, resource.DecimalSI).String()
	deferred := resizePod(t, got, map[string][2]string{"inplace": {all, "128Mi"}})
	waitPod(t, deferred, time.Minute, func(p *corev1.Pod) error {
		c := podCondition(p, corev1.PodResizePending)
		if c == nil || c.Reason != corev1.PodReasonDeferred || c.ObservedGeneration != deferred.Generation {
			return fmt.Errorf("PodResizePending = %+v", c)
		}
		return nil
	})
	if !hasEvent(podEvents(t, deferred), "ResizeDeferred", "Node didn't have enough resource: cpu") {
		t.Errorf("no ResizeDeferred event: %s", eventSummary(podEvents(t, deferred)))
	}
	back := resizePod(t, deferred, map[string][2]string{"inplace": {"300m", "128Mi"}})
	waitPod(t, back, time.Minute, resized(back.Generation, sizes))
}

// TestResizeSurvivesAgentSIGKILL is not parallel: a resize asked while the
// agent is dead is applied by the restarted agent, in place.
func TestResizeSurvivesAgentSIGKILL(t *testing.T) {
	requireNodeagent(t)
	ctx := framework.Context(t, 5*time.Minute)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "resize-kill-", Namespace: podNS},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{resizable("main", "100m", "64Mi", corev1.NotRequired)}},
	}
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)
	id := pod.Status.ContainerStatuses[0].ContainerID

	cfg := framework.Cluster(t)
	killAgent(t, cfg)
	sizes := map[string][2]string{"main": {"250m", "96Mi"}}
	got := resizePod(t, pod, sizes)
	if err := cfg.StartAgent(ctx); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	got = waitPod(t, got, 2*time.Minute, resized(got.Generation, sizes))
	if cs := got.Status.ContainerStatuses[0]; cs.ContainerID != id || cs.RestartCount != 0 {
		t.Errorf("container after the resize: %s restarts %d, want %s and 0", cs.ContainerID, cs.RestartCount, id)
	}
	if got := cgroupOf(t, pod, "main", "cpu/cpu.cfs_quota_us"); got != "25000" {
		t.Errorf("cpu quota after the restarted agent's resize = %s, want 25000", got)
	}
}
