package sync

import (
	"time"

	"k8s.io/utils/clock"
)

// The kubelet's back-off for restarting crashed containers and for
// retrying failed image pulls: 10 s, doubling, capped at 5 min, forgotten
// once a container has run for 10 min.
const (
	backoffInitial    = 10 * time.Second
	backoffMax        = 5 * time.Minute
	backoffResetAfter = 10 * time.Minute
)

// backoff tracks restart delays per key. It belongs to one worker and is
// never shared, so it needs no lock.
type backoff struct {
	clock   clock.PassiveClock
	max     time.Duration
	entries map[string]*backoffEntry
}

type backoffEntry struct {
	delay time.Duration
	last  time.Time // when the delay was last extended
}

// newBackoff builds a back-off capped at max (backoffMax when zero).
func newBackoff(c clock.PassiveClock, max time.Duration) *backoff {
	if max <= 0 {
		max = backoffMax
	}
	return &backoff{clock: c, max: max, entries: map[string]*backoffEntry{}}
}

// remaining returns how long to wait, counted from since (a container's
// finish time or a pull's failure), before trying key again. A container
// that ran longer than backoffResetAfter starts over.
func (b *backoff) remaining(key string, since time.Time, ranFor time.Duration) time.Duration {
	e, ok := b.entries[key]
	if !ok {
		return 0
	}
	if ranFor >= backoffResetAfter {
		delete(b.entries, key)
		return 0
	}
	if wait := since.Add(e.delay).Sub(b.clock.Now()); wait > 0 {
		return wait
	}
	return 0
}

// delay is the current delay of key (zero when none).
func (b *backoff) delay(key string) time.Duration {
	if e, ok := b.entries[key]; ok {
		return e.delay
	}
	return 0
}

// next records a retry of key: the first retry is immediate and sets the
// initial delay for the one after; each further retry doubles it.
func (b *backoff) next(key string) {
	e, ok := b.entries[key]
	if !ok {
		b.entries[key] = &backoffEntry{delay: min(backoffInitial, b.max), last: b.clock.Now()}
		return
	}
	e.delay = min(2*e.delay, b.max)
	e.last = b.clock.Now()
}

// reset forgets key.
func (b *backoff) reset(key string) { delete(b.entries, key) }
