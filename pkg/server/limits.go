package server

import (
	"context"
	"net/http"
	"sync"
)

// The per-user caps on long-lived requests, as 429 messages and
// nodeagent_node_api_limited_requests_total name them.
var (
	limitStreams    = limitKind{label: "streams", what: "exec, attach and port-forward streams", field: "MaxStreamsPerUser"}
	limitLogFollows = limitKind{label: "log_follows", what: "followed container logs (follow=true)", field: "MaxLogFollowsPerUser"}
)

// limitKind names one cap.
type limitKind struct {
	label, what, field string
}

// concurrencyLimit caps how many requests of one kind each client identity
// holds at once, so that one client cannot take all of the node's
// goroutines, file descriptors and runtime streams. Requests over the cap
// are refused at once, not queued: they are streams a user is waiting on.
type concurrencyLimit struct {
	max     int // <= 0: no cap
	kind    limitKind
	metrics *serverMetrics

	mu   sync.Mutex
	held map[string]int
}

func newConcurrencyLimit(limit int, kind limitKind, metrics *serverMetrics) *concurrencyLimit {
	if metrics == nil {
		metrics = newServerMetrics(nil)
	}
	return &concurrencyLimit{max: limit, kind: kind, metrics: metrics, held: map[string]int{}}
}

// acquire takes one of user's places, or returns a 429 error naming the
// cap. release gives it back. A nil limit caps nothing.
func (l *concurrencyLimit) acquire(user string) (release func(), err error) {
	if l == nil || l.max <= 0 {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[user] >= l.max {
		l.metrics.observeLimited(l.kind.label)
		return nil, errorf(http.StatusTooManyRequests,
			"too many concurrent %s: user %q already holds %d, the limit per user (nodeagent's %s)", l.kind.what, user, l.held[user], l.kind.field)
	}
	l.held[user]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.held[user]--; l.held[user] <= 0 {
				delete(l.held, user)
			}
		})
	}, nil
}

type userKey struct{}

// withUser records who a request is from, for the per-user caps.
func withUser(ctx context.Context, u *userInfo) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// userName is the authenticated user of a request; "" when none was
// recorded (handlers driven without authentication, in tests).
func userName(ctx context.Context) string {
	if u, ok := ctx.Value(userKey{}).(*userInfo); ok {
		return u.Name
	}
	return ""
}
