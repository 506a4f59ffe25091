package kube_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// The informers keep pods without their managedFields, listed or watched.
func TestInformerDropsManagedFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}}
	listed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "listed", Namespace: "ns", ManagedFields: managed}}
	cs := fake.NewClientset(listed)
	client := kubetest.Wrap(cs)
	inf := kube.NewInformer(client, client.CoreV1().Pods(metav1.NamespaceAll), &corev1.Pod{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	wait := kube.Start(ctx, inf)
	defer func() { cancel(); wait() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer never synced")
	}
	watched := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "watched", Namespace: "ns", ManagedFields: managed}}
	if _, err := cs.CoreV1().Pods("ns").Create(ctx, watched, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"listed", "watched"} {
		var obj any
		for deadline := time.Now().Add(10 * time.Second); obj == nil; time.Sleep(5 * time.Millisecond) {
			o, ok, err := inf.GetStore().GetByKey("ns/" + name)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				obj = o
			} else if time.Now().After(deadline) {
				t.Fatalf("pod %s never reached the informer", name)
			}
		}
		if mf := obj.(*corev1.Pod).ManagedFields; mf != nil {
			t.Errorf("pod %s kept with managedFields %v", name, mf)
		}
	}
}
