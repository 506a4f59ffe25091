package status

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func newManager(t *testing.T, pods ...*v1.Pod) (*Manager, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := NewManager(Config{Client: client, Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	return m, client
}

func TestManagerWritesKeepsForeignConditionsAndNeverRevertsTerminal(t *testing.T) {
	p := pod(v1.RestartPolicyNever)
	p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue}}
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
