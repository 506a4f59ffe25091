package server

import (
	"sync"
	"time"
)

// tokenBucket allows burst events at once and qps a second after that.
// Time comes from now, so tests move it by hand.
type tokenBucket struct {
	qps   float64
	burst float64
	now   func() time.Time

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// newTokenBucket returns a full bucket, or nil (no limit) when qps is
// negative.
func newTokenBucket(qps float64, burst int, now func() time.Time) *tokenBucket {
	if qps < 0 {
		return nil
	}
	return &tokenBucket{qps: qps, burst: float64(max(burst, 1)), now: now, tokens: float64(max(burst, 1)), last: now()}
}

// allow takes one token if there is one. A nil bucket always allows.
func (b *tokenBucket) allow() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(b.burst, b.tokens+elapsed.Seconds()*b.qps)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
