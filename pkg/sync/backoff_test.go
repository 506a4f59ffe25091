package sync

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestBackoffDoublesToCapAndResets(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	b := newBackoff(clk, 0)
	const key = "uid/c"
	if w := b.remaining(key, clk.Now(), time.Second); w != 0 {
		t.Fatalf("first restart waits %s, want immediate", w)
	}
	var delays []time.Duration
	for range 7 {
		b.next(key)
		delays = append(delays, b.delay(key))
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("delays = %v, want %v", delays, want)
		}
	}
	finished := clk.Now()
	clk.Step(100 * time.Second)
	if w := b.remaining(key, finished, time.Second); w != 200*time.Second {
		t.Errorf("remaining = %s, want 200s", w)
	}
	if w := b.remaining(key, finished, 11*time.Minute); w != 0 {
		t.Errorf("after a long run remaining = %s, want 0 (reset)", w)
	}
	if d := b.delay(key); d != 0 {
		t.Errorf("delay after reset = %s, want 0", d)
	}
}

func TestBackoffHonoursConfiguredMax(t *testing.T) {
	b := newBackoff(clocktesting.NewFakeClock(t0), 15*time.Second)
	for range 3 {
		b.next("k")
	}
	if d := b.delay("k"); d != 15*time.Second {
		t.Errorf("delay = %s, want the configured 15s", d)
	}
}
