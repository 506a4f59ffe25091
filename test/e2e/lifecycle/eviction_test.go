//go:build e2e

package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// evictionConfig is the agent's configuration for the eviction test, over the harness's:
// the node is under disk pressure when less than 40% of its small filesystem is free, and
// stops being so 10s after; volumes are measured every 10s rather than every minute, and
// the node's status is written every 2s, so that a condition lasting the transition
// period is seen.
const evictionConfig = `evictionHard:
  nodefs.available: "40%"
evictionPressureTransitionPeriod: 10s
volumeStatsAggPeriod: 10s
nodeStatusUpdateFrequency: 2s
`

// TestEvictionOnASmallNodeFilesystem shows the eviction manager on real components, with
// the agent's root directory (where emptyDir volumes live) on a filesystem of 300 MiB of
// its own. In turn:
//   - a pod writing past its emptyDir's sizeLimit is evicted, and one writing past its
//     ephemeral-storage limit, while a bystander runs on;
//   - a pod filling an emptyDir past the 40% threshold is evicted for the node's disk
//     pressure, the bystander (within its request) runs on, and DiskPressure clears once the
//     filler's volume is gone;
//   - with the filesystem held full by a file no pod owns (so the pressure lasts as long
//     as the test wants), DiskPressure is True and a new pod is refused as Evicted; the
//     file removed, DiskPressure goes back to False.
func TestEvictionOnASmallNodeFilesystem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cfg := &harness.Config{AgentRootFS: 300 << 20, AgentConfigExtra: evictionConfig}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if cfg.Agent == harness.AgentNone {
		t.Skip("eviction needs a node agent; NODEAGENT_AGENT=none selects none")
	}
	before, cs := framework.UpOwnCluster(ctx, t, cfg)
	ev := &evictionSuite{ctx: ctx, cs: cs, cfg: cfg}

	// Within its request (and with no limit): never the first to go for the node.
	bystander := ev.pod("bystander", "sleep 3600")
	bystander.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("10Mi")}
	ev.run(t, bystander)

	t.Run("emptyDir over its sizeLimit", func(t *testing.T) {
		p := ev.pod("emptydir-over", "dd if=/dev/zero of=/scratch/fill bs=1M count=20 && sleep 3600")
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptrTo(resource.MustParse("10Mi"))}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		ev.create(t, p)
		ev.waitEvicted(t, p.Name, func(msg string) bool {
			return msg == `Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". `
		})
		ev.assertRunning(t, bystander.Name)
	})

	// The writable layer lies in containerd's root, on the machine's disk: the runtime's
	// image filesystem is dedicated. The kubelet then leaves a container's writable layer
	// out of its own limit but counts it in the pod's ephemeral storage, so the pod of one
	// container goes for the pod's total limit: the containers' limits added up.
	t.Run("writable layer over the ephemeral-storage limit", func(t *testing.T) {
		p := ev.pod("layer-over", "dd if=/dev/zero of=/big bs=1M count=20 && sleep 3600")
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("10Mi")}
		ev.create(t, p)
		ev.waitEvicted(t, p.Name, func(msg string) bool {
			return msg == "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. "
		})
		ev.assertRunning(t, bystander.Name)
	})

	t.Run("node pressure evicts the filler", func(t *testing.T) {
		// 200 MiB of the filesystem's 300: less than 40% is left.
		created := time.Now()
		p := ev.pod("filler", "dd if=/dev/zero of=/data/fill bs=1M count=200; sleep 3600")
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		ev.create(t, p)
		ev.waitEvicted(t, p.Name, func(msg string) bool {
			return strings.HasPrefix(msg, "The node was low on resource: ephemeral-storage. Threshold quantity: ")
		})
		// The node had DiskPressure meanwhile (for the transition period at least, with
		// its status written every 2s); the filler's volume went with it, and the pressure
		// ends.
		ev.waitDiskPressure(t, corev1.ConditionFalse, "KubeletHasNoDiskPressure", created)
		ev.assertRunning(t, bystander.Name)
	})

	t.Run("a new pod is refused under pressure", func(t *testing.T) {
		// No pod of the test's is left to evict (the agent's pods of the cluster's own may
		// go); the ballast leaves half the threshold free.
		deletePods(ctx, t, cs, bystander.Name)
		ballast := ev.fillAgentFS(t, 0.2)
		ev.waitDiskPressure(t, corev1.ConditionTrue, "KubeletHasDiskPressure", time.Time{})
		pressed := time.Now()
		p := ev.pod("latecomer", "sleep 3600")
		ev.create(t, p)
		// The kubelet's admission refusal, with the status prefix it puts on every refusal.
		ev.waitEvicted(t, p.Name, func(msg string) bool { return msg == "Pod was rejected: The node had condition: [DiskPressure]. " })
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		ev.waitDiskPressure(t, corev1.ConditionFalse, "KubeletHasNoDiskPressure", pressed)
		ev.run(t, ev.pod("after-pressure", "sleep 3600"))
	})

	downAndAssertClean(ctx, t, cfg, before)
}

type evictionSuite struct {
	ctx context.Context
	cs  kubernetes.Interface
	cfg *harness.Config
}

// pod is a busybox pod running script, bound to the node directly: the scheduler keeps
// pods off a node with DiskPressure (its taint), and the refusal under pressure is the
// agent's to show.
func (e *evictionSuite) pod(name, script string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                      harness.NodeName,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: name, Image: harness.BusyboxImage, Command: []string{"sh", "-c", script}}},
		},
	}
}

// create creates the pod. A pod to be evicted is not waited for to run: it may be gone
// before a look sees it running.
func (e *evictionSuite) create(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if _, err := e.cs.CoreV1().Pods(pod.Namespace).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
}

// run creates the pod and waits for it to run.
func (e *evictionSuite) run(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	e.create(t, pod)
	framework.Eventually(t, 3*time.Minute, func() error {
		p, err := e.cs.CoreV1().Pods(pod.Namespace).Get(e.ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodRunning {
			return nil
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod %s failed before it ran: %s: %s", pod.Name, p.Status.Reason, p.Status.Message)
		}
		return fmt.Errorf("pod %s is %s", pod.Name, p.Status.Phase)
	})
}

// waitEvicted waits for the pod to have failed as Evicted with a message that fits.
func (e *evictionSuite) waitEvicted(t *testing.T, name string, fits func(string) bool) {
	t.Helper()
	framework.Eventually(t, 3*time.Minute, func() error {
		p, err := e.cs.CoreV1().Pods(metav1.NamespaceDefault).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		switch {
		case p.Status.Phase != corev1.PodFailed:
			return fmt.Errorf("pod %s is %s", name, p.Status.Phase)
		case p.Status.Reason != "Evicted" || !fits(p.Status.Message):
			t.Fatalf("pod %s failed with reason %q and message %q, want Evicted and the kubelet's message", name, p.Status.Reason, p.Status.Message)
		}
		return nil
	})
}

// assertRunning fails unless the pod still runs its first container.
func (e *evictionSuite) assertRunning(t *testing.T, name string) {
	t.Helper()
	p, err := e.cs.CoreV1().Pods(metav1.NamespaceDefault).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("pod %s: %s (%s: %s), containers %+v; want it running on", name, p.Status.Phase, p.Status.Reason, p.Status.Message, p.Status.ContainerStatuses)
	}
}

// waitDiskPressure waits for the node's DiskPressure condition to have the status and
// reason, taken on after since.
func (e *evictionSuite) waitDiskPressure(t *testing.T, status corev1.ConditionStatus, reason string, since time.Time) {
	t.Helper()
	e.waitNodeCondition(t, corev1.NodeDiskPressure, status, reason, since)
}

// fillAgentFS writes a file into the agent's filesystem, outside every pod, until only
// the share left of its capacity is available, and returns its path. The pressure it makes
// lasts until it is removed: no eviction frees it.
func (e *evictionSuite) fillAgentFS(t *testing.T, left float64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(e.cfg.AgentRootDir(), &st); err != nil {
		t.Fatal(err)
	}
	capacity, available := int64(st.Blocks)*st.Bsize, int64(st.Bavail)*st.Bsize
	size := available - int64(float64(capacity)*left)
	if size <= 0 {
		t.Fatalf("the agent's filesystem has %d of %d bytes available, less than %.0f%% already", available, capacity, left*100)
	}
	path := filepath.Join(e.cfg.AgentRootDir(), "e2e-ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
	buf := make([]byte, 1<<20)
	for written := int64(0); written < size; {
		n, err := f.Write(buf[:min(int64(len(buf)), size-written)])
		if err != nil {
			f.Close()
			t.Fatalf("fill the agent's filesystem: %v", err)
		}
		written += int64(n)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func ptrTo[T any](v T) *T { return &v }
