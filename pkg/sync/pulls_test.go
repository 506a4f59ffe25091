package sync

import (
	"context"
	goruntime "runtime"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSlotsLimitParallelCalls(t *testing.T) {
	d := newSlots(2)
	ctx := context.Background()
	r1, err := d.slot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := d.slot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		r3, err := d.slot(ctx)
		if err == nil {
			r3()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a third pull started while two ran (limit 2): %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	r1()
	if err := <-got; err != nil {
		t.Fatalf("third pull after a release: %v", err)
	}
	r2()

	// A pull waiting for its turn gives up with its context.
	one := newSlots(1)
	release, _ := one.slot(ctx)
	defer release()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := one.slot(cctx); err == nil {
		t.Error("a waiting pull ignored its cancelled context")
	}
	// No limit: never waits.
	unlimited := newSlots(0)
	for range 10 {
		if _, err := unlimited.slot(cctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMaxParallelSandboxes(t *testing.T) {
	if got, want := maxParallelSandboxes(0), sandboxesPerCPU*goruntime.NumCPU(); got != want {
		t.Errorf("default = %d, want %d", got, want)
	}
	if got := maxParallelSandboxes(3); got != 3 {
		t.Errorf("3 = %d", got)
	}
	if got := maxParallelSandboxes(-1); got != 0 {
		t.Errorf("negative = %d, want 0 (no limit)", got)
	}
}

// signalSandbox tells when the worker asks the runtime for a sandbox.
type signalSandbox struct {
	Runtime
	asked chan struct{}
}

func (r *signalSandbox) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	close(r.asked)
	return r.Runtime.RunPodSandbox(ctx, cfg, handler)
}

func TestWorkerWaitsForASandboxTurn(t *testing.T) {
	pod := basePod()
	h := newHarness(t, pod)
	rec := &signalSandbox{Runtime: h.w.deps.runtime, asked: make(chan struct{})}
	h.w.deps.runtime = rec
	h.w.deps.sandboxes = newSlots(1)
	held, err := h.w.deps.sandboxes.slot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.sync(pod, false)
	}()
	select {
	case <-rec.asked:
		t.Fatal("a sandbox was asked for while the only turn was taken")
	case <-time.After(50 * time.Millisecond):
	}
	held()
	<-rec.asked
	<-done
	if len(h.rt.Sandboxes) != 1 {
		t.Errorf("sandboxes = %d after the turn came, want 1", len(h.rt.Sandboxes))
	}
}
