package sync

import (
	"maps"
	"time"
)

// The kubelet's back-off for restarting crashed containers and for
// retrying failed image pulls: 10 s, doubling, capped at 5 min, forgotten
// once a container has run for 10 min.
const (
	backoffInitial    = 10 * time.Second
	backoffMax        = 5 * time.Minute
	backoffResetAfter = 10 * time.Minute
)

// sandboxBackoff is how long a pod whose sandbox could not be created
// waits before the next try: the kubelet's pod worker back-off after a
// failed sync (backOffPeriod; the kubelet adds up to half again as jitter).
const sandboxBackoff = 10 * time.Second

// backoffs are restart or pull delays by key (a container, an image). They
// are values: decide reads them, advance replaces them; nothing changes
// one in place, so a copy handed to the decision never moves under it.
type backoffs map[string]backoffEntry

type backoffEntry struct {
	delay time.Duration
	last  time.Time // when the delay was last extended
}

// remaining returns how long to wait at now, counted from since (a
// container's finish time or a pull's failure), before trying key again.
// A container that ran for backoffResetAfter or longer has earned a fresh
// start and waits for nothing.
func (b backoffs) remaining(key string, since time.Time, ranFor time.Duration, now time.Time) time.Duration {
	e, ok := b[key]
	if !ok || ranFor >= backoffResetAfter {
		return 0
	}
	return max(since.Add(e.delay).Sub(now), 0)
}

// delay is the current delay of key (zero when none).
func (b backoffs) delay(key string) time.Duration { return b[key].delay }

// next records a retry of key at now and returns the new back-offs: the
// first retry (or the first after a reset) is immediate and sets the
// initial delay for the one after; each further retry doubles it, up to
// limit (backoffMax when zero).
func (b backoffs) next(key string, now time.Time, limit time.Duration, reset bool) backoffs {
	if limit <= 0 {
		limit = backoffMax
	}
	out := maps.Clone(b)
	if out == nil {
		out = backoffs{}
	}
	e, ok := out[key]
	if !ok || reset {
		out[key] = backoffEntry{delay: min(backoffInitial, limit), last: now}
		return out
	}
	out[key] = backoffEntry{delay: min(2*e.delay, limit), last: now}
	return out
}

// without forgets key.
func (b backoffs) without(key string) backoffs {
	if _, ok := b[key]; !ok {
		return b
	}
	out := maps.Clone(b)
	delete(out, key)
	return out
}

// pullRemaining is how long a pull of the image keyed key still waits
// after its last failure.
func (b backoffs) pullRemaining(key string, now time.Time) time.Duration {
	e, ok := b[key]
	if !ok {
		return 0
	}
	return b.remaining(key, e.last, 0, now)
}
