package sync

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/pleg"
	"github.com/nodeagent/nodeagent/pkg/volume"
)

// benchDispatcher is newHarness's Dispatcher, not running: workers it starts get no
// goroutine, so what is handed to them stays for the benchmark to see.
func benchDispatcher(b *testing.B) *Dispatcher {
	b.Helper()
	rt, img := critesting.NewFakeRuntimeService(), critesting.NewFakeImageService()
	p, err := pleg.New(pleg.Config{Runtime: rt, Clock: clock.RealClock{}})
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	volumes, err := volume.NewManager(volume.Config{RootDir: root})
	if err != nil {
		b.Fatal(err)
	}
	d, err := NewDispatcher(Config{Runtime: rt, Images: img, Cache: p.Cache(), Relister: p,
		Status: &fakeStatus{}, Recorder: record.NewFakeRecorder(1000), Secrets: noSecrets{}, Volumes: volumes, RootDir: root,
		NodeIPs: []string{"10.0.0.1"}, RuntimeName: "fake"})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// statusWritten is pod as the informer delivers it after the agent wrote its status:
// a new object, decoded afresh, whose resourceVersion and status alone differ.
func statusWritten(pod *v1.Pod, version string, probed time.Time) *v1.Pod {
	p := pod.DeepCopy()
	p.ResourceVersion = version
	start := metav1.NewTime(t0)
	p.Status = v1.PodStatus{Phase: v1.PodRunning, HostIP: "10.0.0.1", PodIP: "10.244.0.7", StartTime: &start, QOSClass: v1.PodQOSBurstable}
	for _, t := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.PodScheduled} {
		p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: t, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(probed)})
	}
	for _, c := range pod.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, v1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "sha256:1234",
			ContainerID: "fake://" + c.Name + "-id", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: start}}})
	}
	return p
}

// BenchmarkDispatcherStatusUpdate is the Dispatcher handing a running pod's worker the
// pod after the agent's own status write came back: the most frequent update. Only
// the status changed, so the worker keeps the pod for its next pass and is not woken.
func BenchmarkDispatcherStatusUpdate(b *testing.B) {
	d := benchDispatcher(b)
	// Generation 1, as the apiserver sets it on a new pod.
	pod := basePod(typical, func(p *v1.Pod) { p.Generation = 1 })
	d.UpsertPod(statusWritten(pod, "1", t0))
	d.mu.Lock()
	w := d.workers[pod.UID]
	d.mu.Unlock()
	if w == nil {
		b.Fatal("the pod got no worker")
	}
	updates := []*v1.Pod{statusWritten(pod, "2", t0.Add(time.Second)), statusWritten(pod, "3", t0.Add(2*time.Second))}
	check := func(want *v1.Pod) {
		b.Helper()
		if latest, _ := w.latest(); latest != want {
			b.Fatalf("the worker holds resourceVersion %s, want %s", latest.ResourceVersion, want.ResourceVersion)
		}
		if len(w.wake) != 0 || w.updated {
			b.Fatal("a status-only update woke the worker, or was taken for a spec change")
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(d.resizing) != 0 || len(d.pending) != 0 {
			b.Fatalf("%d resizes, %d pending pods: want none", len(d.resizing), len(d.pending))
		}
	}
	d.UpsertPod(updates[0])
	check(updates[0])
	b.ReportAllocs()
	i := 0
	for ; b.Loop(); i++ {
		d.UpsertPod(updates[i%len(updates)])
	}
	check(updates[(i-1)%len(updates)])
}

// BenchmarkAdmittedPods is what admission reads each time it judges a pod on a node of
// 250 pods: every running pod with its allocation applied. It runs once per pod admitted,
// so its cost per pod is what grows admission's cost with the node's pods.
func BenchmarkAdmittedPods(b *testing.B) {
	d := benchDispatcher(b)
	const pods = 250
	for i := range pods {
		pod := named(fmt.Sprintf("uid-%03d", i), fmt.Sprintf("pod-%03d", i), t0, typical)
		if err := d.deps.alloc.SetAllocated(pod); err != nil {
			b.Fatal(err)
		}
		d.UpsertPod(pod)
	}
	for b.Loop() {
		d.mu.Lock()
		admitted := d.admittedLocked()
		d.mu.Unlock()
		if len(admitted) != pods {
			b.Fatalf("%d pods admitted, want %d", len(admitted), pods)
		}
	}
}
