package sync

import (
	"context"
	"testing"
	"time"
)

func TestPullSlotsLimitParallelPulls(t *testing.T) {
	d := newPullSlots(2)
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
	one := newPullSlots(1)
	release, _ := one.slot(ctx)
	defer release()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := one.slot(cctx); err == nil {
		t.Error("a waiting pull ignored its cancelled context")
	}
	// No limit: never waits.
	unlimited := newPullSlots(0)
	for range 10 {
		if _, err := unlimited.slot(cctx); err != nil {
			t.Fatal(err)
		}
	}
}
