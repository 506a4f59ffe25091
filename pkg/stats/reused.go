package stats

import (
	"sync"
	"time"
)

// reused is a value read now and then and used again while it is younger
// than a period: what the eviction pass reads every 10 s but changes
// seldom (the runtime's filesystems, the kernel's process limit).
type reused[T any] struct {
	mu sync.Mutex
	v  T
	at time.Time
}

// get returns the value read less than period before now, or else (and
// with fresh) reads it again with read and keeps it.
func (r *reused[T]) get(now time.Time, period time.Duration, fresh bool, read func() (T, error)) (T, error) {
	r.mu.Lock()
	v, at := r.v, r.at
	r.mu.Unlock()
	if !fresh && !at.IsZero() && now.Sub(at) < period {
		return v, nil
	}
	v, err := read()
	if err != nil {
		var zero T
		return zero, err
	}
	r.mu.Lock()
	r.v, r.at = v, now
	r.mu.Unlock()
	return v, nil
}
