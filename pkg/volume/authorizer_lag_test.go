package volume

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// turned starts lag.turn for a pod at rv in the background; the channel
// gets its answered function once the read may go.
func turned(lag *authorizerLag, rv uint64) <-chan func(bool) {
	ch := make(chan func(bool), 1)
	go func() { ch <- lag.turn(context.Background(), rv) }()
	return ch
}

// waitingReads waits until n reads are held back.
func waitingReads(t *testing.T, lag *authorizerLag, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		lag.mu.Lock()
		held := 0
		for _, c := range lag.waiting {
			held += c
		}
		lag.mu.Unlock()
		if held == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reads held back, want %d", held, n)
		}
	}
}

// notYet fails when a read held back was let go.
func notYet(t *testing.T, ch <-chan func(bool), what string) {
	t.Helper()
	select {
	case <-ch:
		t.Errorf("%s went while it should wait", what)
	case <-time.After(20 * time.Millisecond):
	}
}

// got waits for a read to be let go.
func got(t *testing.T, ch <-chan func(bool), what string) func(bool) {
	t.Helper()
	select {
	case answered := <-ch:
		return answered
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never went", what)
		return nil
	}
}

// While one pod's first read is under way, newer pods' wait; its answer
// lets the newest waiting go alone, and that one's answer every older one.
// A pod no newer than one let through reads at once.
func TestAuthorizerLagProbesWithTheNewestPodWaiting(t *testing.T) {
	var lag authorizerLag
	probe := got(t, turned(&lag, 5), "the first read")
	r6, r9, r7 := turned(&lag, 6), turned(&lag, 9), turned(&lag, 7)
	waitingReads(t, &lag, 3)
	probe(true)
	next := got(t, r9, "the newest pod's read")
	notYet(t, r6, "an older pod's read")
	notYet(t, r7, "an older pod's read")
	next(true)
	got(t, r6, "rv 6 once rv 9 was let through")(true)
	got(t, r7, "rv 7 once rv 9 was let through")(true)
	got(t, turned(&lag, 8), "a pod older than one let through")(true)
	if lag.caught != 9 || lag.probing || len(lag.waiting) != 0 {
		t.Errorf("caught %d, probing %v, waiting %v; want 9, false, none", lag.caught, lag.probing, lag.waiting)
	}
}

// A probe refused for good lets the next newest pod probe; a read that no
// probe answers goes on its own after lagHoldMax; a pod without a
// resourceVersion that orders is never held.
func TestAuthorizerLagNeverHoldsForGood(t *testing.T) {
	saved := lagHoldMax
	lagHoldMax = 50 * time.Millisecond
	t.Cleanup(func() { lagHoldMax = saved })

	var lag authorizerLag
	probe := got(t, turned(&lag, 3), "the first read")
	r4 := turned(&lag, 4)
	waitingReads(t, &lag, 1)
	probe(false)
	stuck := got(t, r4, "the next pod's read after a probe refused for good")
	if lag.caught != 0 {
		t.Errorf("caught %d after a refusal, want 0", lag.caught)
	}
	start := time.Now()
	got(t, turned(&lag, 5), "a read held by a probe never answered")(true)
	if waited := time.Since(start); waited < lagHoldMax {
		t.Errorf("went after %v, want lagHoldMax (%v)", waited, lagHoldMax)
	}
	stuck(true)
	got(t, turned(&lag, 0), "a pod without a resourceVersion")(false)
	if lag.caught != 5 || lag.probing {
		t.Errorf("caught %d, probing %v; want 5, false", lag.caught, lag.probing)
	}
}

// The Node authorizer's graph is behind for a moment while twenty pods
// bound at once ask for their first tokens: only one pod's request is sent
// until one is let through, so one request is refused, not one a pod.
func TestTokenFirstRequestsWaitForTheNewestPods(t *testing.T) {
	saved := forbiddenRetries
	forbiddenRetries = []time.Duration{30 * time.Millisecond, 30 * time.Millisecond}
	t.Cleanup(func() { forbiddenRetries = saved })
	f := newFixture(t)
	const pods = 20
	var (
		mu       sync.Mutex
		caughtUp time.Time // when the authorizer's graph has every pod
	)
	f.tokens.refuse = func(string) error {
		mu.Lock()
		defer mu.Unlock()
		if caughtUp.IsZero() {
			caughtUp = time.Now().Add(20 * time.Millisecond)
		}
		if time.Now().After(caughtUp) {
			return nil
		}
		return apierrors.NewForbidden(v1.Resource("serviceaccounts"), "builder",
			errors.New("no relationship found between node 'node-a' and this object"))
	}
	proj := &v1.ServiceAccountTokenProjection{Path: "t"}
	errs := make(chan error, pods)
	for i := range pods {
		rv := 101 + i
		pod := basePod(func(p *v1.Pod) {
			p.Name, p.UID, p.ResourceVersion = fmt.Sprintf("web-%d", rv), types.UID(fmt.Sprintf("uid-%d", rv)), strconv.Itoa(rv)
		})
		go func() {
			_, err := f.mgr.tokens.token(context.Background(), pod, proj)
			errs <- err
		}()
	}
	for range pods {
		if err := <-errs; err != nil {
			t.Fatalf("token: %v", err)
		}
	}
	f.tokens.mu.Lock()
	defer f.tokens.mu.Unlock()
	if len(f.tokens.refusedPods) != 1 || f.tokens.attempts != pods+1 {
		t.Errorf("%d requests, refused for %v; want %d: one refusal, then each pod's once", f.tokens.attempts, f.tokens.refusedPods, pods+1)
	}
}
