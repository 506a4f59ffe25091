package sync

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/admission"
	"github.com/nodeagent/nodeagent/pkg/timeline"
)

// A pod's way through the worker is recorded step by step where it is
// logged, each step once, in order, and the pod is forgotten once done.
func TestWorkerRecordsTimeline(t *testing.T) {
	pod := basePod(withInit("init"), func(p *v1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		// Present on the node: found, or pulled to check the pod's
		// right to it (pull records), the same step either way.
		p.Spec.InitContainers[0].ImagePullPolicy = v1.PullIfNotPresent
		p.Spec.Containers[0].ImagePullPolicy = v1.PullIfNotPresent
	})
	h := newHarness(t, pod)
	store, err := timeline.New(timeline.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.d.deps.timeline = store

	h.sync(pod, false)
	h.exit("init", 0)
	h.sync(pod, false)
	h.sync(pod, false) // sees the app container running: ready
	deleted := pod.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	h.sync(deleted, false)
	if !h.sync(deleted, true) {
		t.Fatal("worker not done after removal")
	}

	tl, ok := store.Get(pod.Namespace, pod.Name)
	if !ok {
		t.Fatal("no timeline")
	}
	var got []string
	for _, s := range tl.Steps {
		if s.Outcome != timeline.Done {
			t.Errorf("step %s: %s %s", s.Name, s.Outcome, s.Error)
		}
		if s.End.Before(s.Start) {
			t.Errorf("step %s ends before it starts", s.Name)
		}
		if s.Cached && !s.End.Equal(s.Start) {
			t.Errorf("step %+v: an image found present takes no time", s)
		}
		got = append(got, s.Name)
	}
	want := []string{"volumes", "sandbox", "pullImage:init", "createContainer:init", "startContainer:init",
		"pullImage:a", "createContainer:a", "startContainer:a", "ready",
		// Its termination, the newest containers removed first.
		"stopContainer:a", "stopSandbox", "finalStatus", "removeContainer:a", "removeContainer:init", "removeSandbox",
		"unmountVolumes", "confirmDeletion"}
	if !slices.Equal(got, want) {
		t.Errorf("steps\n got %v\nwant %v", got, want)
	}
	if tl.Gone.IsZero() {
		t.Error("the pod is not marked gone")
	}
}

// The admission's verdict is a step of the pod, a refusal with its reason.
func TestAdmissionRecordsTimeline(t *testing.T) {
	pod := basePod()
	h := newHarness(t, pod)
	store, err := timeline.New(timeline.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.d.deps.timeline = store
	h.d.cfg.Admitter = refuseAll{}
	h.d.cfg.Node = func(ctx context.Context) (*v1.Node, error) { return &v1.Node{}, nil }
	h.d.mu.Lock()
	h.d.pending[pod.UID] = pod
	h.d.mu.Unlock()
	h.d.admit(context.Background(), pod.UID)

	tl, _ := store.Get(pod.Namespace, pod.Name)
	if len(tl.Steps) != 1 || tl.Steps[0].Name != "admit" || tl.Steps[0].Outcome != timeline.Failed || tl.Steps[0].Error != "OutOfcpu: no room" {
		t.Errorf("steps %+v, want admit failed with the reason", tl.Steps)
	}
}

type refuseAll struct{}

func (refuseAll) Admit(klog.Logger, *v1.Pod, *v1.Node, []*v1.Pod) admission.Result {
	return admission.Result{Reason: "OutOfcpu", Message: "no room"}
}
