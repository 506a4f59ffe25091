package server

import (
	compbase "k8s.io/component-base/metrics"
)

// MetricsRegistry is where the node API registers its own metrics;
// pkg/metrics' Registry() is one.
type MetricsRegistry interface {
	MustRegister(...compbase.Registerable)
}

// Results of a TokenReview, as nodeagent_token_reviews_total labels them.
const (
	reviewAuthenticated   = "authenticated"
	reviewUnauthenticated = "unauthenticated"
	reviewError           = "error"
)

// serverMetrics are the node API's own metrics. Until registered they
// count nothing, so a server built without a registry (tests) pays nothing.
type serverMetrics struct {
	tokenReviews          *compbase.CounterVec
	tokenReviewsThrottled *compbase.Counter
	limited               *compbase.CounterVec
}

func newServerMetrics(reg MetricsRegistry) *serverMetrics {
	m := &serverMetrics{
		tokenReviews: compbase.NewCounterVec(&compbase.CounterOpts{
			Namespace: "nodeagent", Name: "token_reviews_total",
			Help: "TokenReviews the node API sent to check bearer tokens, by result: " +
				"authenticated, unauthenticated, or error (the apiserver could not answer).",
			StabilityLevel: compbase.ALPHA,
		}, []string{"result"}),
		tokenReviewsThrottled: compbase.NewCounter(&compbase.CounterOpts{
			Namespace: "nodeagent", Name: "token_reviews_throttled_total",
			Help:           "Requests with a bearer token not in the cache answered 429 because the TokenReview rate limit was reached.",
			StabilityLevel: compbase.ALPHA,
		}),
		limited: compbase.NewCounterVec(&compbase.CounterOpts{
			Namespace: "nodeagent", Name: "node_api_limited_requests_total",
			Help:           "Node API requests answered 429 because their user held too many at once, by limit: streams or log_follows.",
			StabilityLevel: compbase.ALPHA,
		}, []string{"limit"}),
	}
	if reg != nil {
		reg.MustRegister(m.tokenReviews, m.tokenReviewsThrottled, m.limited)
	}
	return m
}

func (m *serverMetrics) observeTokenReview(result string) {
	m.tokenReviews.WithLabelValues(result).Inc()
}

func (m *serverMetrics) observeTokenReviewThrottled() { m.tokenReviewsThrottled.Inc() }

func (m *serverMetrics) observeLimited(limit string) { m.limited.WithLabelValues(limit).Inc() }
