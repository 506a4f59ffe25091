package status

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

func newManager(t *testing.T, pods ...*v1.Pod) (*Manager, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := NewManager(Config{Client: kubetest.Wrap(client), Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	return m, client
}

func TestManagerWritesKeepsForeignConditionsAndNeverRevertsTerminal(t *testing.T) {
	p := pod(v1.RestartPolicyNever)
	p.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue}}
	m, client := newManager(t, p)
	ctx := context.Background()

	m.Set(p, v1.PodStatus{Phase: v1.PodSucceeded, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: ReasonPodCompleted}}})
	m.writeDue(ctx)
	got, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.PodSucceeded || len(got.Status.Conditions) != 2 {
		t.Fatalf("status after write: %+v", got.Status)
	}

	m.Set(p, v1.PodStatus{Phase: v1.PodRunning})
	m.writeDue(ctx)
	got, _ = client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if got.Status.Phase != v1.PodSucceeded {
		t.Errorf("terminal phase reverted to %s", got.Status.Phase)
	}
}

func TestManagerFinalStatusOfDeletedPodConfirmsDeletion(t *testing.T) {
	p := pod(v1.RestartPolicyAlways)
	now := metav1.NewTime(t0)
	p.DeletionTimestamp = &now
	m, client := newManager(t, p)
	ctx := context.Background()
	m.SetFinal(p, v1.PodStatus{Phase: v1.PodFailed})
	m.writeDue(ctx)
	if _, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod not deleted after its final status: %v", err)
	}
	var deleteOpts *metav1.DeleteOptions
	for _, a := range client.Actions() {
		if a.GetVerb() == "delete" {
			if da, ok := a.(interface{ GetDeleteOptions() metav1.DeleteOptions }); ok {
				o := da.GetDeleteOptions()
				deleteOpts = &o
			}
		}
	}
	if deleteOpts == nil || deleteOpts.GracePeriodSeconds == nil || *deleteOpts.GracePeriodSeconds != 0 ||
		deleteOpts.Preconditions == nil || deleteOpts.Preconditions.UID == nil || *deleteOpts.Preconditions.UID != p.UID {
		t.Errorf("delete options %+v, want grace 0 and the pod UID as precondition", deleteOpts)
	}
}

func TestManagerForgetsMissingPods(t *testing.T) {
	p := pod(v1.RestartPolicyAlways)
	m, client := newManager(t)
	ctx := context.Background()
	m.Set(p, v1.PodStatus{Phase: v1.PodRunning}) // the pod does not exist yet: forgotten, not retried forever
	m.writeDue(ctx)
	if len(m.pods) != 0 {
		t.Errorf("status of a missing pod kept: %v", m.pods)
	}
	if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.Set(p, v1.PodStatus{Phase: v1.PodRunning})
	m.writeDue(ctx)
	got, _ := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if got.Status.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running", got.Status.Phase)
	}
}

func TestManagerWritesStaticPodStatusToItsMirror(t *testing.T) {
	static := pod(v1.RestartPolicyAlways)
	static.UID = "static-uid"
	static.Annotations = map[string]string{annotationSource: "file", annotationHash: "static-uid"}
	m, client := newManager(t)
	clock := m.cfg.Clock.(*clocktesting.FakeClock)
	ctx := context.Background()
	pods := client.CoreV1().Pods(static.Namespace)

	m.Set(static, v1.PodStatus{Phase: v1.PodRunning})
	m.writeDue(ctx) // no mirror pod yet: the status waits
	if len(m.pods) != 1 {
		t.Fatal("the status of a static pod without a mirror pod was dropped")
	}

	stale := static.DeepCopy()
	stale.UID = "old-mirror-uid"
	stale.Annotations = map[string]string{annotationSource: "file", annotationMirror: "older-hash"}
	if _, err := pods.Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.Step(mirrorWait)
	m.writeDue(ctx) // a mirror pod of another version of the file: not ours
	if got, _ := pods.Get(ctx, static.Name, metav1.GetOptions{}); got.Status.Phase != "" {
		t.Fatalf("the status went to a mirror pod of another hash: %+v", got.Status)
	}

	if err := pods.Delete(ctx, static.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mirror := static.DeepCopy()
	mirror.UID = "mirror-uid"
	mirror.Annotations[annotationMirror] = "static-uid"
	if _, err := pods.Create(ctx, mirror, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.Step(mirrorWait)
	m.writeDue(ctx)
	got, err := pods.Get(ctx, static.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.PodRunning || got.UID != "mirror-uid" {
		t.Errorf("mirror pod after the write: uid %s status %+v", got.UID, got.Status)
	}

	// A static pod's final status never deletes its mirror pod.
	now := metav1.NewTime(t0)
	static.DeletionTimestamp = &now
	m.SetFinal(static, v1.PodStatus{Phase: v1.PodFailed})
	m.writeDue(ctx)
	if _, err := pods.Get(ctx, static.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the mirror pod is gone: %v", err)
	}
}

// Run writes a status when it is set and again when a failed write's
// back-off ends, and sleeps in between: no timer runs while nothing waits.
func TestRunRetriesAfterBackoffAndSleepsOtherwise(t *testing.T) {
	p := pod(v1.RestartPolicyAlways)
	m, client := newManager(t, p)
	clock := m.cfg.Clock.(*clocktesting.FakeClock)
	var mu sync.Mutex
	patches := 0
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		patches++
		if patches == 1 {
			return true, nil, apierrors.NewInternalError(errors.New("etcd is down"))
		}
		return false, nil, nil
	})
	seen := func() int {
		mu.Lock()
		defer mu.Unlock()
		return patches
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	// Nothing set: Run waits without a timer.
	time.Sleep(20 * time.Millisecond)
	if clock.HasWaiters() {
		t.Error("a timer runs with nothing to write")
	}
	m.Set(p, v1.PodStatus{Phase: v1.PodRunning})
	waitFor("the first write", func() bool { return seen() == 1 })
	waitFor("the retry's timer", clock.HasWaiters)
	clock.Step(retryInitial - time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if n := seen(); n != 1 {
		t.Fatalf("%d writes before the back-off ended, want 1", n)
	}
	clock.Step(time.Millisecond)
	waitFor("the retry", func() bool { return seen() == 2 })
	got, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.PodRunning {
		t.Errorf("status after the retry: %+v", got.Status)
	}
	waitFor("the timer to go once the status is written", func() bool { return !clock.HasWaiters() })
}
