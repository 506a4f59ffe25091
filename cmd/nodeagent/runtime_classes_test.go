package main

import (
	"context"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

func TestRuntimeClassesHandler(t *testing.T) {
	client := fake.NewClientset(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandboxed"}, Handler: "runsc"})
	classes, informer := newRuntimeClasses(kubetest.Wrap(client))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	wait := kube.Start(ctx, informer)
	defer func() { cancel(); wait() }()

	// The first lookup waits for the first list.
	if got, err := classes.Handler(ctx, "sandboxed"); err != nil || got != "runsc" {
		t.Errorf("Handler(sandboxed) = %q, %v; want runsc", got, err)
	}
	_, err := classes.Handler(ctx, "missing")
	if want := `runtimeclass.node.k8s.io "missing" not found`; err == nil || err.Error() != want {
		t.Errorf("Handler(missing) err = %v, want the kubelet's %q", err, want)
	}
}
