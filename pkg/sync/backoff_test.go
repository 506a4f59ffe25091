package sync

import (
	"testing"
	"time"
)

func TestBackoffDoublesToCapAndResets(t *testing.T) {
	now := t0
	var b backoffs
	const key = "uid/c"
	if w := b.remaining(key, now, time.Second, now); w != 0 {
		t.Fatalf("first restart waits %s, want immediate", w)
	}
	var delays []time.Duration
	for range 7 {
		b = b.next(key, now, 0, false)
		delays = append(delays, b.delay(key))
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("delays = %v, want %v", delays, want)
		}
	}
	finished := now
	now = now.Add(100 * time.Second)
	if w := b.remaining(key, finished, time.Second, now); w != 200*time.Second {
		t.Errorf("remaining = %s, want 200s", w)
	}
	if w := b.remaining(key, finished, 11*time.Minute, now); w != 0 {
		t.Errorf("after a long run remaining = %s, want 0 (reset)", w)
	}
	if d := b.next(key, now, 0, true).delay(key); d != backoffInitial {
		t.Errorf("delay after a reset = %s, want the initial %s", d, backoffInitial)
	}
}

func TestBackoffHonoursConfiguredMax(t *testing.T) {
	var b backoffs
	for range 3 {
		b = b.next("k", t0, 15*time.Second, false)
	}
	if d := b.delay("k"); d != 15*time.Second {
		t.Errorf("delay = %s, want the configured 15s", d)
	}
}

func TestBackoffsAreValues(t *testing.T) {
	a := backoffs{}.next("k", t0, 0, false)
	b := a.next("k", t0, 0, false)
	if a.delay("k") != backoffInitial || b.delay("k") != 2*backoffInitial {
		t.Errorf("next changed the back-offs it was called on: %v, %v", a, b)
	}
	if c := b.without("k"); len(c) != 0 || len(b) != 1 {
		t.Errorf("without changed the back-offs it was called on: %v, %v", b, c)
	}
}
