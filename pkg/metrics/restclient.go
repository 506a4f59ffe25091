package metrics

import (
	"context"
	"net/url"
	"time"

	clientmetrics "k8s.io/client-go/tools/metrics"
)

// RegisterRESTClient makes client-go report its requests here, as
// rest_client_requests_total and rest_client_request_duration_seconds.
// client-go keeps its metrics hooks in package variables that can be set
// once per process, so only the first call has an effect: the
// composition root makes it, once.
func (m *Metrics) RegisterRESTClient() {
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestResult:  restResult{m},
		RequestLatency: restLatency{m},
	})
}

type restResult struct{ m *Metrics }

func (r restResult) Increment(_ context.Context, code, method, host string) {
	r.m.restRequests.WithLabelValues(code, method, host).Inc()
}

type restLatency struct{ m *Metrics }

func (r restLatency) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	r.m.restLatency.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}
