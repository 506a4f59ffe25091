package node

import (
	"context"
	"errors"
	goruntime "runtime"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func newTestLease(uid *types.UID) (*leaseRenewer, *fake.Clientset, *clocktesting.FakeClock) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(testStart)
	return &leaseRenewer{
		client: client, clock: clk, nodeName: "nodeagent-node", durationSeconds: 40,
		nodeUID: func() types.UID { return *uid },
	}, client, clk
}

func getLease(t *testing.T, client *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases(LeaseNamespace).Get(context.Background(), "nodeagent-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLeaseRenew(t *testing.T) {
	uid := types.UID("")
	l, client, clk := newTestLease(&uid)
	ctx := context.Background()
	if l.interval() != 10*time.Second {
		t.Errorf("interval = %v, want a quarter of 40s", l.interval())
	}

	// Before registration: created without an owner.
	if err := l.renew(ctx); err != nil {
		t.Fatal(err)
	}
	lease := getLease(t, client)
	if *lease.Spec.HolderIdentity != "nodeagent-node" || *lease.Spec.LeaseDurationSeconds != 40 || len(lease.OwnerReferences) != 0 {
		t.Fatalf("lease = %+v", lease)
	}

	// After registration: renewed and owned by the Node.
	uid = "node-uid-1"
	clk.Step(10 * time.Second)
	if err := l.renew(ctx); err != nil {
		t.Fatal(err)
	}
	lease = getLease(t, client)
	if !lease.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Errorf("renewTime = %v, want %v", lease.Spec.RenewTime, clk.Now())
	}
	if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != "node-uid-1" || lease.OwnerReferences[0].Kind != "Node" {
		t.Errorf("owner = %v", lease.OwnerReferences)
	}

	// The Node was re-registered: the owner follows the new UID.
	uid = "node-uid-2"
	if err := l.renew(ctx); err != nil {
		t.Fatal(err)
	}
	if got := getLease(t, client).OwnerReferences[0].UID; got != "node-uid-2" {
		t.Errorf("owner UID = %q", got)
	}
}

func TestLeaseRecoversFromFailedUpdate(t *testing.T) {
	uid := types.UID("u")
	l, client, _ := newTestLease(&uid)
	ctx := context.Background()
	if err := l.renew(ctx); err != nil {
		t.Fatal(err)
	}
	fail := true
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			fail = false
			return true, nil, errors.New("conflict")
		}
		return false, nil, nil
	})
	if err := l.renew(ctx); err == nil {
		t.Fatal("want the injected error")
	}
	if l.latest != nil {
		t.Fatal("cached lease kept after a failed update")
	}
	if err := l.renew(ctx); err != nil {
		t.Fatalf("second renew: %v", err)
	}
}

func TestLeaseRunRetriesFast(t *testing.T) {
	uid := types.UID("u")
	l, client, clk := newTestLease(&uid)
	attempts := make(chan struct{}, 10)
	calls := 0
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		attempts <- struct{}{}
		if calls == 1 {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx); close(done) }()
	<-attempts
	// The retry waits leaseRetryInitial, not the whole interval.
	for !clk.HasWaiters() {
		goruntime.Gosched() // until the renewer waits on the fake clock
	}
	clk.Step(leaseRetryInitial)
	<-attempts
	cancel()
	<-done
}
