//go:build e2e

package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestImageGCAndMemoryPressure: on a cluster whose runtime keeps its images on a filesystem
// of its own (1.5 GiB, a loop device), the agent restarted each time with thresholds the
// test computes from what it measures:
//   - image GC by disk usage: the image filesystem crosses imageGCHighThresholdPercent when
//     a second big unused image is pulled, and unused images are removed until it is at
//     imageGCLowThresholdPercent — not all of them (one of the two big ones stays), and
//     never an image in use;
//   - a memory hog, past a memory.available threshold set 1.5 GiB below what this machine
//     has free when the test runs, is evicted (not OOM-killed) while a Guaranteed pod runs
//     on, and MemoryPressure goes True and back to False.
func TestImageGCAndMemoryPressure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cfg := &harness.Config{RuntimeRootFS: 1536 << 20}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if cfg.Agent != harness.AgentNodeagent {
		t.Skip("the hidden --image-gc-period is nodeagent's; NODEAGENT_AGENT selects another agent")
	}
	before, cs := framework.UpOwnCluster(ctx, t, cfg)
	ev := &evictionSuite{ctx: ctx, cs: cs, cfg: cfg}
	t.Run("image GC from the high threshold down to the low", func(t *testing.T) { ev.imageGCByUsage(t) })
	t.Run("a memory hog is evicted, not OOM-killed", func(t *testing.T) { ev.memoryHog(t) })
	downAndAssertClean(ctx, t, cfg, before)
}

func (e *evictionSuite) imageGCByUsage(t *testing.T) {
	_, img, closeFn, err := e.cfg.CRI(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	keep := e.pod("imagegc-keep", "sleep 3600")
	e.run(t, keep)
	defer deletePods(e.ctx, t, e.cs, keep.Name)

	// What GC may take before the test's images: everything but the running pod's image
	// and the pinned sandbox image.
	busybox := criImageID(t, e.ctx, img, harness.BusyboxImage)
	var others int64
	for _, i := range listImages(t, e.ctx, img) {
		if i.GetId() != busybox && !i.GetPinned() {
			others += int64(i.GetSize())
		}
	}
	// Two images big enough that removing the others and one of them is enough, and the
	// other then stays: each more than twice the others together.
	size := max(96<<20, 2*others+(32<<20))
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	refA := pushRandomImage(t, e.ctx, "gc-a:"+run, size)
	refB := pushRandomImage(t, e.ctx, "gc-b:"+run, size)

	capacity, used0 := e.imageFs(t)
	pullImage(t, e.ctx, img, refA)
	_, used1 := e.imageFs(t)
	idA := criImageID(t, e.ctx, img, refA)
	sizeA := imageSize(t, e.ctx, img, refA)
	// Pulling B costs the image filesystem what pulling A did.
	costA := used1 - used0
	usedB := used1 + costA
	// The kubelet's usage: 100 less the share available, rounded down.
	pct := func(used int64) int { return 100 - int((capacity-used)*100/capacity) }
	// The high threshold just below the usage with B: crossed by B's pull, not before.
	high := pct(usedB) - 1
	// Free the others and half of one big image (as the runtime counts images, by their
	// content: their unpacked snapshots free as much again): the low threshold's bytes to
	// free are capacity×(100−low)/100 − available.
	need := others + sizeA/2
	low := 100 - int((need+capacity-usedB)*100/capacity)
	if pct(used1) >= high || low <= 0 || low >= high || pct(usedB) >= 80 {
		t.Fatalf("no thresholds fit: capacity %d, used %d before A, %d with A (%d%%), %d with B (%d%%); high %d%%, low %d%%",
			capacity, used0, used1, pct(used1), usedB, pct(usedB), high, low)
	}
	t.Logf("image fs of %d MiB: %d%% used with A, %d%% with B; high %d%%, low %d%%; others %d MiB, A %d MiB",
		capacity>>20, pct(used1), pct(usedB), high, low, others>>20, sizeA>>20)

	// imageMinimumGCAge 1s (0 is the kubelet's "unset", 2 minutes): B, detected by the
	// collection that finds the filesystem over the threshold, is not taken by it.
	e.restartAgent(t, fmt.Sprintf("imageGCHighThresholdPercent: %d\nimageGCLowThresholdPercent: %d\nimageMinimumGCAge: 1s\n", high, low),
		"--image-gc-period=5s")
	if got := pct(e.usedImageFs(t)); got >= high {
		t.Fatalf("image fs %d%% used before B is pulled, want below the high threshold %d%%", got, high)
	}
	pullImage(t, e.ctx, img, refB)
	idB := criImageID(t, e.ctx, img, refB)

	framework.Eventually(t, 3*time.Minute, func() error {
		if got := pct(e.usedImageFs(t)); got > low {
			return fmt.Errorf("image fs %d%% used, want at most the low threshold %d%%", got, low)
		}
		return nil
	})
	var left []string
	for _, id := range []string{idA, idB} {
		if criImageID(t, e.ctx, img, id) != "" {
			left = append(left, id)
		}
	}
	if len(left) != 1 {
		t.Errorf("of the two big unused images %d are left, want one: GC goes down to the low threshold, no further", len(left))
	}
	for _, ref := range []string{harness.BusyboxImage, harness.PauseImage} {
		if criImageID(t, e.ctx, img, ref) == "" {
			t.Errorf("image %s, in use, was removed", ref)
		}
	}
	e.assertRunning(t, keep.Name)
	if s := e.agentMetric(t, `kubelet_image_garbage_collected_total{reason="space"}`); s < 1 {
		t.Errorf(`kubelet_image_garbage_collected_total{reason="space"} = %v, want images counted`, s)
	}
	events, err := e.cs.CoreV1().Events(metav1.NamespaceDefault).List(e.ctx, metav1.ListOptions{FieldSelector: "reason=FreeDiskSpaceFailed"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) > 0 {
		t.Errorf("FreeDiskSpaceFailed: %s", events.Items[0].Message)
	}
}

func (e *evictionSuite) memoryHog(t *testing.T) {
	// The threshold 1.5 GiB below what is available now, as the agent measures it; the hog
	// takes 3 GiB in a memory-backed emptyDir, which its eviction frees.
	available := e.memoryAvailable(t)
	threshold := available - 1536<<20
	e.restartAgent(t, fmt.Sprintf("evictionHard:\n  memory.available: %dMi\nevictionPressureTransitionPeriod: 10s\nnodeStatusUpdateFrequency: 2s\n", threshold>>20))
	if got := e.memoryAvailable(t); got < threshold+(512<<20) {
		t.Fatalf("memory available fell from %d to %d MiB before the hog: the machine is too busy for this test", available>>20, got>>20)
	}

	bystander := e.pod("guaranteed", "sleep 3600")
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	bystander.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: small, Limits: small}
	e.run(t, bystander)

	created := time.Now()
	hog := e.pod("hog", "dd if=/dev/zero of=/hog/fill bs=1M count=3072 && sleep 3600")
	hog.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")},
	}
	hog.Spec.Volumes = []corev1.Volume{{Name: "hog", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
	hog.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "hog", MountPath: "/hog"}}
	e.create(t, hog)
	e.waitEvicted(t, hog.Name, func(msg string) bool {
		return strings.HasPrefix(msg, "The node was low on resource: memory. Threshold quantity: ")
	})
	p, err := e.cs.CoreV1().Pods(metav1.NamespaceDefault).Get(e.ctx, hog.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.ContainerStatuses {
		if term := c.State.Terminated; term != nil && term.Reason == "OOMKilled" {
			t.Errorf("the hog was OOM-killed, want it evicted: %+v", term)
		}
	}
	disrupted := false
	for _, c := range p.Status.Conditions {
		disrupted = disrupted || (c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue &&
			c.Reason == "TerminationByKubelet" && c.Message == p.Status.Message)
	}
	if !disrupted {
		t.Errorf("the evicted hog's conditions %+v: no DisruptionTarget by the kubelet with the eviction's message", p.Status.Conditions)
	}
	e.waitNodeCondition(t, corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", created)
	// The turns of the condition were recorded as the kubelet records them.
	framework.Eventually(t, time.Minute, func() error {
		events, err := e.cs.CoreV1().Events(metav1.NamespaceDefault).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node"})
		if err != nil {
			return err
		}
		for _, reason := range []string{"NodeHasInsufficientMemory", "NodeHasSufficientMemory"} {
			found := false
			for _, ev := range events.Items {
				found = found || (ev.Reason == reason && ev.LastTimestamp.Time.After(created.Add(-time.Second)) &&
					ev.Message == "Node "+harness.NodeName+" status is now: "+reason)
			}
			if !found {
				return fmt.Errorf("no %s event on the node since the hog was created", reason)
			}
		}
		return nil
	})
	if n := e.agentMetric(t, `kubelet_evictions{eviction_signal="memory.available"}`); n < 1 {
		t.Errorf(`kubelet_evictions{eviction_signal="memory.available"} = %v, want the hog counted`, n)
	}
	e.assertRunning(t, bystander.Name)
	deletePods(e.ctx, t, e.cs, bystander.Name, hog.Name)
}

// restartAgent starts the agent again with the harness's configuration, config over it in
// a drop-in, and flags.
func (e *evictionSuite) restartAgent(t *testing.T, config string, flags ...string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "90-test.conf"), []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.cfg.StopAgent(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.cfg.StartAgent(e.ctx, append([]string{"--config-dir=" + dir}, flags...)...); err != nil {
		t.Fatalf("start the agent with %q: %v", config, err)
	}
}

// imageFs returns the image filesystem's size and the bytes used on it.
func (e *evictionSuite) imageFs(t *testing.T) (capacity, used int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(e.cfg.RuntimeRootDir(), &st); err != nil {
		t.Fatal(err)
	}
	capacity = int64(st.Blocks) * st.Bsize
	return capacity, capacity - int64(st.Bavail)*st.Bsize
}

func (e *evictionSuite) usedImageFs(t *testing.T) int64 {
	_, used := e.imageFs(t)
	return used
}

// memoryAvailable is the node's memory.available as the agent's Summary API reports it.
func (e *evictionSuite) memoryAvailable(t *testing.T) int64 {
	t.Helper()
	var s statsapi.Summary
	framework.Eventually(t, time.Minute, func() error {
		raw, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", harness.NodeName, "proxy/stats/summary").DoRaw(e.ctx)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		if s.Node.Memory == nil || s.Node.Memory.AvailableBytes == nil {
			return fmt.Errorf("no node memory in the summary")
		}
		return nil
	})
	return int64(*s.Node.Memory.AvailableBytes)
}

// agentMetric is the value of one sample of the agent's /metrics, given as it is written
// there (name{labels}); zero when absent.
func (e *evictionSuite) agentMetric(t *testing.T, sample string) float64 {
	t.Helper()
	raw, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", harness.NodeName, "proxy/metrics").DoRaw(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// waitNodeCondition waits for the node's condition of type typ to have the status and
// reason, taken on after since (to the second the apiserver keeps).
func (e *evictionSuite) waitNodeCondition(t *testing.T, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason string, since time.Time) {
	t.Helper()
	framework.Eventually(t, 3*time.Minute, func() error {
		node, err := e.cs.CoreV1().Nodes().Get(e.ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == typ {
				if c.Status != status || c.Reason != reason || c.LastTransitionTime.Time.Before(since.Truncate(time.Second)) {
					return fmt.Errorf("%s %s (%s) since %s, want %s (%s) since %s", typ, c.Status, c.Reason,
						c.LastTransitionTime.Format(time.RFC3339), status, reason, since.Format(time.RFC3339))
				}
				return nil
			}
		}
		return fmt.Errorf("node %s has no %s condition", harness.NodeName, typ)
	})
}

// pushRandomImage pushes busybox with a layer of size random bytes (which no compression
// shrinks) to the local registry as nodeagent/<repoTag>, and returns its reference.
func pushRandomImage(t *testing.T, ctx context.Context, repoTag string, size int64) string {
	t.Helper()
	layer, err := random.Layer(size, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	return framework.PushBusyboxVariant(t, ctx, repoTag, nil, layer)
}

func listImages(t *testing.T, ctx context.Context, img runtimeapi.ImageServiceClient) []*runtimeapi.Image {
	t.Helper()
	resp, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatalf("CRI ListImages: %v", err)
	}
	return resp.GetImages()
}

func pullImage(t *testing.T, ctx context.Context, img runtimeapi.ImageServiceClient, ref string) {
	t.Helper()
	if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
		t.Fatalf("CRI PullImage %s: %v", ref, err)
	}
}

// criImageID is the ID of the runtime's image named ref (a reference or an ID), empty when
// the runtime has none.
func criImageID(t *testing.T, ctx context.Context, img runtimeapi.ImageServiceClient, ref string) string {
	t.Helper()
	resp, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("CRI ImageStatus %s: %v", ref, err)
	}
	return resp.GetImage().GetId()
}

func imageSize(t *testing.T, ctx context.Context, img runtimeapi.ImageServiceClient, ref string) int64 {
	t.Helper()
	resp, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("CRI ImageStatus %s: %v", ref, err)
	}
	return int64(resp.GetImage().GetSize())
}
