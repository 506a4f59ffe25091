package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxCachedReviews bounds the review caches, so that a client sending a new
// token (or a new identity) on each request cannot grow them without end.
const maxCachedReviews = 4096

// errTokenRejected is a token the apiserver does not recognise.
var errTokenRejected = errors.New("token rejected")

// errTokenReviewsThrottled is a token not in the cache met while the
// TokenReview rate limit is reached: it was not reviewed.
var errTokenReviewsThrottled = errors.New("too many token reviews; try again later")

// reviewTimeout bounds one TokenReview.
const reviewTimeout = 30 * time.Second

type tokenEntry struct {
	user    *userInfo
	err     error
	expires time.Time
}

// tokenCacheConfig configures a tokenCache.
type tokenCacheConfig struct {
	// reviewer sends the TokenReviews.
	reviewer tokenReviewer
	// successTTL and failureTTL are how long accepted and refused tokens
	// are remembered.
	successTTL, failureTTL time.Duration
	// limit is how many reviews may be sent; nil means no limit.
	limit *tokenBucket
	// metrics counts reviews; nil counts nothing.
	metrics *serverMetrics
	// now is the clock; nil means time.Now.
	now func() time.Time
}

// tokenCache checks bearer tokens with TokenReview and remembers the answer:
// accepted tokens for successTTL, rejected ones for failureTTL. Failures to
// reach the apiserver are not remembered. Concurrent requests with the same
// token share one review, and reviews of tokens not in the cache are rate
// limited. Tokens are kept only as SHA-256 digests.
type tokenCache struct {
	reviewer   tokenReviewer
	successTTL time.Duration
	failureTTL time.Duration
	limit      *tokenBucket
	metrics    *serverMetrics
	now        func() time.Time

	flight  singleflight.Group
	mu      sync.Mutex
	entries map[string]tokenEntry
}

func newTokenCache(cfg tokenCacheConfig) *tokenCache {
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.metrics == nil {
		cfg.metrics = newServerMetrics(nil)
	}
	return &tokenCache{
		reviewer: cfg.reviewer, successTTL: cfg.successTTL, failureTTL: cfg.failureTTL,
		limit: cfg.limit, metrics: cfg.metrics, now: cfg.now, entries: map[string]tokenEntry{},
	}
}

// review returns the token's user, or an error: errTokenRejected when the
// apiserver said no, errTokenReviewsThrottled when it was not asked for
// the rate limit, another error when it could not be asked.
func (c *tokenCache) review(ctx context.Context, token string) (*userInfo, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if e, ok := c.lookup(key); ok {
		return e.user, e.err
	}
	v, err, _ := c.flight.Do(key, func() (any, error) {
		// A review of this token may have ended since the lookup above.
		if e, ok := c.lookup(key); ok {
			return e, nil
		}
		if !c.limit.allow() {
			c.metrics.observeTokenReviewThrottled()
			return nil, errTokenReviewsThrottled
		}
		// The review outlives a caller that goes away: others may wait on it.
		ctx := context.WithoutCancel(ctx)
		ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		res, err := c.reviewer.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			c.metrics.observeTokenReview(reviewError)
			return nil, fmt.Errorf("token review: %w", err)
		}
		if !res.Status.Authenticated {
			c.metrics.observeTokenReview(reviewUnauthenticated)
			e := tokenEntry{err: errTokenRejected, expires: c.now().Add(c.failureTTL)}
			if res.Status.Error != "" {
				e.err = fmt.Errorf("%w: %s", errTokenRejected, res.Status.Error)
			}
			c.store(key, e)
			return e, nil
		}
		c.metrics.observeTokenReview(reviewAuthenticated)
		u := res.Status.User
		user := &userInfo{Name: u.Username, UID: u.UID, Groups: u.Groups}
		if len(u.Extra) > 0 {
			user.Extra = make(map[string][]string, len(u.Extra))
			for k, v := range u.Extra {
				user.Extra[k] = v
			}
		}
		e := tokenEntry{user: user, expires: c.now().Add(c.successTTL)}
		c.store(key, e)
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	e := v.(tokenEntry)
	return e.user, e.err
}

func (c *tokenCache) lookup(key string) (tokenEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return tokenEntry{}, false
	}
	if !c.now().Before(e.expires) {
		delete(c.entries, key)
		return tokenEntry{}, false
	}
	return e, true
}

func (c *tokenCache) store(key string, e tokenEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	makeRoom(c.entries, c.now(), func(e tokenEntry) time.Time { return e.expires })
	c.entries[key] = e
}

// makeRoom drops expired entries once a cache is full, and an arbitrary one
// if none has expired.
func makeRoom[E any](m map[string]E, now time.Time, expires func(E) time.Time) {
	if len(m) < maxCachedReviews {
		return
	}
	for k, e := range m {
		if !now.Before(expires(e)) {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) < maxCachedReviews {
			return
		}
		delete(m, k)
	}
}
