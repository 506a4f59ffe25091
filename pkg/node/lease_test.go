package node

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

func newTestLease(uid *types.UID) (*leaseRenewer, *fake.Clientset, *clocktesting.FakeClock) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(testStart)
	return &leaseRenewer{
		client: kubetest.Wrap(client), clock: clk, nodeName: "nodeagent-node", durationSeconds: 40,
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

// waitRecorder is a fake clock that reports every wait the renewer starts,
// once the wait is registered, so the test steps the clock exactly when
// the renewer is blocked on it and knows how long it chose to wait.
type waitRecorder struct {
	*clocktesting.FakeClock
	waits chan time.Duration
}

func (c *waitRecorder) After(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.After(d)
	c.waits <- d
	return ch
}

// TestLeaseRunRetriesFast drives run through failures and successes and
// checks each wait it chooses and the Lease it leaves: a failure is retried
// after leaseRetryInitial, doubling, not after the whole interval; a
// success renews the Lease to the clock's time and waits the interval; a
// success resets the back-off.
func TestLeaseRunRetriesFast(t *testing.T) {
	uid := types.UID("u")
	l, client, fakeClock := newTestLease(&uid)
	clk := &waitRecorder{FakeClock: fakeClock, waits: make(chan time.Duration, 8)}
	l.clock = clk
	var failCreates, failUpdates atomic.Int32
	failCreates.Store(2)
	failing := func(n *atomic.Int32) k8stesting.ReactionFunc {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			if n.Add(-1) >= 0 {
				return true, nil, errors.New("apiserver unavailable")
			}
			return false, nil, nil
		}
	}
	client.PrependReactor("create", "leases", failing(&failCreates))
	client.PrependReactor("update", "leases", failing(&failUpdates))
	renewedAt := func(step string) {
		t.Helper()
		lease, err := client.CoordinationV1().Leases(LeaseNamespace).Get(context.Background(), "nodeagent-node", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if !lease.Spec.RenewTime.Time.Equal(clk.Now()) {
			t.Fatalf("%s: renewTime = %v, want %v", step, lease.Spec.RenewTime.Time, clk.Now())
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx); close(done) }()
	// run must return once ctx ends; if it does not, the test hangs here.
	t.Cleanup(func() { cancel(); <-done })

	steps := []struct {
		name     string
		before   func() // runs while the renewer waits, before its wait ends
		wantWait time.Duration
		after    func(step string) // checks the state the renewal left
	}{
		{name: "first create fails", wantWait: leaseRetryInitial},
		{name: "second create fails", wantWait: 2 * leaseRetryInitial},
		{name: "create succeeds", wantWait: 10 * time.Second, after: renewedAt},
		{name: "update succeeds", wantWait: 10 * time.Second, after: renewedAt},
		{name: "update fails after a success", before: func() { failUpdates.Store(1) }, wantWait: leaseRetryInitial},
		{name: "update succeeds again", wantWait: 10 * time.Second, after: renewedAt},
	}
	for i, step := range steps {
		if step.before != nil {
			step.before()
		}
		if i > 0 {
			clk.Step(steps[i-1].wantWait)
		}
		got := <-clk.waits
		if got != step.wantWait {
			t.Fatalf("%s: run waits %v, want %v", step.name, got, step.wantWait)
		}
		if step.after != nil {
			step.after(step.name)
		}
	}
}
