package main

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestLeaderRunsWorkWhileLeading: with --leader-election the controller runs only once
// this replica holds the driver's lease, and stops with ctx.
func TestLeaderRunsWorkWhileLeading(t *testing.T) {
	client := fake.NewClientset()
	o := options{
		leaderElectionNamespace: "kube-system",
		leaderElectionLabels:    map[string]string{"app": "resizer"},
		leaseDuration:           2 * time.Second,
		renewDeadline:           time.Second,
		retryPeriod:             100 * time.Millisecond,
	}
	l := newLeader(client, o, "csi-mock-ns.example")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.run(ctx, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the work did not start")
	}
	lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "external-resizer-csi-mock-ns-example", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" || lease.Labels["app"] != "resizer" {
		t.Errorf("lease = %+v", lease)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after ctx ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after ctx ended")
	}
}
