package pleg

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
)

// countingRuntime counts relists (one ListPodSandbox each).
type countingRuntime struct {
	*critesting.FakeRuntimeService
	relists atomic.Int64
}

func (r *countingRuntime) ListPodSandbox(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	r.relists.Add(1)
	return r.FakeRuntimeService.ListPodSandbox(ctx, f)
}

// fakeEvents is an event stream the test drives: each value sent on events is a container
// event, a value sent on fail ends the stream with that error.
type fakeEvents struct {
	events chan struct{}
	fail   chan error
	opens  atomic.Int64
}

func (f *fakeEvents) source(ctx context.Context, onEvent func(types.UID, string)) error {
	f.opens.Add(1)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-f.fail:
			return err
		case <-f.events:
			onEvent("", "unknown")
		}
	}
}

// eventually waits up to d for cond.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With the event stream open the periodic relist slows to EventedRelistPeriod and each
// event brings a relist within EventRelistDelay; when the stream ends, a relist follows at
// once and the period is the short one again until the stream is open again.
func TestEventsDriveRelistsAndTheRelistFallsBack(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := &countingRuntime{FakeRuntimeService: critesting.NewFakeRuntimeService()}
	ev := &fakeEvents{events: make(chan struct{}), fail: make(chan error)}
	p, err := New(Config{Runtime: rt, RelistPeriod: 100 * time.Millisecond, Events: ev.source})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Run(ctx) }()
	// Before the stream counts as open: every 100 ms.
	eventually(t, time.Second, "relists every period before the stream settles", func() bool { return rt.relists.Load() >= 3 })
	eventually(t, 3*time.Second, "the stream counted as open", p.eventsOpen.Load)
	time.Sleep(150 * time.Millisecond) // a relist already under way ends
	quiet := rt.relists.Load()
	time.Sleep(500 * time.Millisecond)
	if n := rt.relists.Load() - quiet; n != 0 {
		t.Fatalf("%d relists in 500 ms with the event stream open, want none before %v", n, EventedRelistPeriod)
	}
	// A burst of events: one relist soon after.
	for range 5 {
		ev.events <- struct{}{}
	}
	eventually(t, time.Second, "a relist after the events", func() bool { return rt.relists.Load() > quiet })
	time.Sleep(200 * time.Millisecond)
	if n := rt.relists.Load() - quiet; n > 2 {
		t.Errorf("%d relists for a burst of 5 events, want them gathered into one or two", n)
	}
	// The stream breaks: relists every period again, and it is reopened.
	ev.fail <- errors.New("transport is closing")
	eventually(t, time.Second, "the stream counted as closed", func() bool { return !p.eventsOpen.Load() })
	broken := rt.relists.Load()
	eventually(t, time.Second, "relists every period with the stream down", func() bool { return rt.relists.Load() >= broken+3 })
	eventually(t, 5*time.Second, "the stream reopened", func() bool { return ev.opens.Load() >= 2 && p.eventsOpen.Load() })
}

// A runtime without GetContainerEvents leaves the PLEG relisting every period, and it does
// not ask again.
func TestNoEventsFromTheRuntimeKeepsRelisting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := &countingRuntime{FakeRuntimeService: critesting.NewFakeRuntimeService()}
	var opens atomic.Int64
	unimplemented := func(context.Context, func(types.UID, string)) error {
		opens.Add(1)
		return status.Error(codes.Unimplemented, "unknown method GetContainerEvents")
	}
	p, err := New(Config{Runtime: rt, RelistPeriod: 100 * time.Millisecond, Events: unimplemented})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Run(ctx) }()
	time.Sleep(1500 * time.Millisecond)
	if p.eventsOpen.Load() {
		t.Error("a runtime without the RPC counted as streaming events")
	}
	if n := rt.relists.Load(); n < 8 {
		t.Errorf("%d relists in 1.5 s at a 100 ms period", n)
	}
	if n := opens.Load(); n != 1 {
		t.Errorf("the event stream was asked for %d times, want once", n)
	}
}
