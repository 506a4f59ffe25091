package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	compbase "k8s.io/component-base/metrics"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// testCA signs client certificates in tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a client certificate; mutate adjusts the template.
func (ca *testCA) issue(t *testing.T, cn string, orgs []string, mutate func(*x509.Certificate)) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if mutate != nil {
		mutate(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestX509Authentication(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	other := newTestCA(t, "other-ca")
	caFile := writeTemp(t, "ca.crt", ca.pem)

	tests := []struct {
		name      string
		anonymous bool
		cert      *tls.Certificate
		token     string
		want      string // "user [groups]" or "401"
	}{
		{name: "valid certificate", cert: ptr(ca.issue(t, "alice", []string{"dev", "ops"}, nil)), want: "alice [dev ops system:authenticated]"},
		{name: "apiserver client", cert: ptr(ca.issue(t, "kube-apiserver-kubelet-client", []string{"kubeadm:cluster-admins"}, nil)),
			want: "kube-apiserver-kubelet-client [kubeadm:cluster-admins system:authenticated]"},
		{name: "other CA", cert: ptr(other.issue(t, "mallory", nil, nil)), want: "401"},
		{name: "other CA even with anonymous", anonymous: true, cert: ptr(other.issue(t, "mallory", nil, nil)), want: "401"},
		{name: "expired", cert: ptr(ca.issue(t, "old", nil, func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
		})), want: "401"},
		{name: "server-only usage", cert: ptr(ca.issue(t, "srv", nil, func(c *x509.Certificate) {
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		})), want: "401"},
		{name: "no common name", cert: ptr(ca.issue(t, "", []string{"g"}, nil)), want: "401"},
		{name: "nothing, anonymous off", want: "401"},
		{name: "nothing, anonymous on", anonymous: true, want: "system:anonymous [system:unauthenticated]"},
		{name: "token without webhook", anonymous: true, token: "abc", want: "401"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			authn, err := newAuthenticator(Config{ClientCAFile: caFile, AnonymousEnabled: tt.anonymous}, nil)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				u, err := authn.authenticate(r)
				if err != nil {
					if !errors.Is(err, errUnauthorized) {
						t.Errorf("error %v does not wrap errUnauthorized", err)
					}
					http.Error(w, err.Error(), http.StatusUnauthorized)
					return
				}
				fmt.Fprintf(w, "%s %v", u.Name, u.Groups)
			}))
			srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert, ClientCAs: authn.clientCAs.Pool()}
			srv.StartTLS()
			defer srv.Close()
			client := srv.Client()
			tr := client.Transport.(*http.Transport)
			if tt.cert != nil {
				// Sent even when the server lists other CAs, as a hostile
				// client would.
				tr.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return tt.cert, nil }
			}
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/pods", nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got := strings.TrimSpace(string(body))
			if resp.StatusCode == http.StatusUnauthorized {
				got = "401"
			}
			if got != tt.want {
				t.Errorf("got %q (%d), want %q", body, resp.StatusCode, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// tokenReactor answers TokenReviews from tokens (token -> user name) and
// counts them in calls (may be nil).
func tokenReactor(calls *atomic.Int32, tokens map[string]string) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		if calls != nil {
			calls.Add(1)
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		if name, ok := tokens[tr.Spec.Token]; ok {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{
				Username: name, UID: "uid-" + name, Groups: []string{"team"}, Extra: map[string]authnv1.ExtraValue{"scope": {"a"}},
			}}
		} else {
			tr.Status = authnv1.TokenReviewStatus{Error: "token not found"}
		}
		return true, tr, nil
	}
}

func tokenClient(calls *atomic.Int32, tokens map[string]string) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", tokenReactor(calls, tokens))
	return c
}

func TestTokenCache(t *testing.T) {
	var calls atomic.Int32
	client := tokenClient(&calls, map[string]string{"good": "carol"})
	now := time.Unix(1000, 0)
	c := newTokenCache(tokenCacheConfig{reviewer: client.AuthenticationV1().TokenReviews(), successTTL: time.Minute, failureTTL: 10 * time.Second, now: func() time.Time { return now }})
	ctx := context.Background()

	review := func(token string, wantUser string, wantCalls int32) {
		t.Helper()
		u, err := c.review(ctx, token)
		switch {
		case wantUser == "" && !errors.Is(err, errTokenRejected):
			t.Fatalf("review(%q) = %v, %v; want rejection", token, u, err)
		case wantUser != "" && (err != nil || u.Name != wantUser):
			t.Fatalf("review(%q) = %v, %v; want %s", token, u, err, wantUser)
		}
		if calls.Load() != wantCalls {
			t.Fatalf("after review(%q): %d TokenReviews, want %d", token, calls.Load(), wantCalls)
		}
	}
	review("good", "carol", 1)
	review("good", "carol", 1)
	review("bad", "", 2)
	review("bad", "", 2)
	now = now.Add(11 * time.Second)
	review("bad", "", 3)
	review("good", "carol", 3)
	now = now.Add(time.Minute)
	review("good", "carol", 4)

	u, _ := c.review(ctx, "good")
	if u.UID != "uid-carol" || u.Extra["scope"][0] != "a" || u.Groups[0] != "team" {
		t.Errorf("user = %+v", u)
	}
}

func TestTokenCacheDoesNotKeepErrors(t *testing.T) {
	var calls atomic.Int32
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		return true, nil, errors.New("connection refused")
	})
	c := newTokenCache(tokenCacheConfig{reviewer: client.AuthenticationV1().TokenReviews(), successTTL: time.Minute, failureTTL: time.Minute})
	for range 2 {
		if _, err := c.review(context.Background(), "t"); err == nil || errors.Is(err, errTokenRejected) {
			t.Fatalf("err = %v, want a review failure", err)
		}
	}
	if calls.Load() != 2 {
		t.Errorf("%d reviews, want 2 (failures are not cached)", calls.Load())
	}
}

// gatedReviewer answers every review as user dave, but holds each answer
// until n reviews are under way at once or wait has passed. Shared
// reviews never reach n, so each waits; unshared ones are let go together.
// Unlike the fake clientset, it does not serialise calls.
type gatedReviewer struct {
	n     int32
	wait  time.Duration
	calls atomic.Int32
	all   chan struct{}
}

func (g *gatedReviewer) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	if g.calls.Add(1) == g.n {
		close(g.all)
	}
	select {
	case <-g.all:
	case <-time.After(g.wait):
	}
	out := tr.DeepCopy()
	out.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "dave"}}
	return out, nil
}

// TestTokenCacheSharesConcurrentReviews: n identical requests at once
// send one TokenReview. Without the sharing all n reach the reviewer
// together and the count says so.
func TestTokenCacheSharesConcurrentReviews(t *testing.T) {
	const n = 16
	reviewer := &gatedReviewer{n: n, wait: 500 * time.Millisecond, all: make(chan struct{})}
	c := newTokenCache(tokenCacheConfig{reviewer: reviewer, successTTL: time.Minute, failureTTL: time.Minute})
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			if u, err := c.review(context.Background(), "good"); err != nil || u.Name != "dave" {
				t.Errorf("review = %v, %v", u, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := reviewer.calls.Load(); got != 1 {
		t.Errorf("%d TokenReviews for %d concurrent requests with one token, want 1", got, n)
	}
}

// TestTokenReviewsRateLimited: reviews of tokens not in the cache take
// from a token bucket; past it a token is not reviewed (and nothing is
// remembered of it), while cached answers cost nothing.
func TestTokenReviewsRateLimited(t *testing.T) {
	var calls atomic.Int32
	client := tokenClient(&calls, map[string]string{"good": "carol"})
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	reg := compbase.NewKubeRegistry()
	c := newTokenCache(tokenCacheConfig{
		reviewer: client.AuthenticationV1().TokenReviews(), successTTL: time.Minute, failureTTL: time.Minute,
		limit: newTokenBucket(1, 3, clock), metrics: newServerMetrics(reg), now: clock,
	})
	ctx := context.Background()
	steps := []struct {
		token   string
		advance time.Duration
		want    error // nil: carol
		calls   int32
	}{
		{token: "bad-1", want: errTokenRejected, calls: 1},
		{token: "bad-2", want: errTokenRejected, calls: 2},
		{token: "good", calls: 3},
		{token: "bad-3", want: errTokenReviewsThrottled, calls: 3},
		{token: "good", calls: 3},
		{token: "bad-1", want: errTokenRejected, calls: 3},
		{token: "bad-3", advance: time.Second, want: errTokenRejected, calls: 4},
		{token: "bad-4", want: errTokenReviewsThrottled, calls: 4},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		u, err := c.review(ctx, s.token)
		switch {
		case s.want == nil && (err != nil || u.Name != "carol"):
			t.Fatalf("step %d: review(%q) = %v, %v; want carol", i, s.token, u, err)
		case s.want != nil && !errors.Is(err, s.want):
			t.Fatalf("step %d: review(%q) = %v, %v; want %v", i, s.token, u, err, s.want)
		}
		if calls.Load() != s.calls {
			t.Fatalf("step %d: after review(%q), %d TokenReviews, want %d", i, s.token, calls.Load(), s.calls)
		}
	}
	want := map[string]float64{
		`nodeagent_token_reviews_total{result="unauthenticated"}`: 3,
		`nodeagent_token_reviews_total{result="authenticated"}`:   1,
		`nodeagent_token_reviews_throttled_total`:                 2,
	}
	for name, v := range want {
		if got := gathered(t, reg)[name]; got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
}

// gathered is what reg exposes, as "name{label=\"value\",...}" -> value.
func gathered(t *testing.T, reg compbase.KubeRegistry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := f.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestBadTokenFlood: many requests with distinct made-up tokens at once
// through the whole handler send no more TokenReviews than the bucket
// holds; the rest are answered 429 with Retry-After, none of them 5xx.
func TestBadTokenFlood(t *testing.T) {
	var calls atomic.Int32
	reg := compbase.NewKubeRegistry()
	cfg := baseConfig(t)
	cfg.WebhookAuthenticationEnabled = true
	cfg.Client = kubetest.Wrap(tokenClient(&calls, nil))
	cfg.TokenReviewQPS = 0.001
	cfg.TokenReviewBurst = 5
	cfg.MetricsRegistry = reg
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.listener.Close() })
	const flood = 100
	codes := make(chan int, flood)
	var wg sync.WaitGroup
	for i := range flood {
		wg.Go(func() {
			r := httptest.NewRequest(http.MethodGet, "/pods", nil)
			r.Header.Set("Authorization", fmt.Sprintf("Bearer made-up-%d", i))
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			if rec.Code == http.StatusTooManyRequests && rec.Header().Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
			codes <- rec.Code
		})
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if calls.Load() != 5 || count[http.StatusUnauthorized] != 5 || count[http.StatusTooManyRequests] != flood-5 {
		t.Errorf("%d TokenReviews, answers %v; want 5 reviews, 5 401s and %d 429s", calls.Load(), count, flood-5)
	}
	if got := gathered(t, reg)[`nodeagent_token_reviews_total{result="unauthenticated"}`]; got != 5 {
		t.Errorf("nodeagent_token_reviews_total{result=\"unauthenticated\"} = %v, want 5", got)
	}
}

func TestBearerToken(t *testing.T) {
	tests := []struct {
		name, header, token string
		ok                  bool
	}{
		{name: "bearer", header: "Bearer abc", token: "abc", ok: true},
		{name: "case", header: "bearer abc", token: "abc", ok: true},
		{name: "basic", header: "Basic abc"},
		{name: "empty token", header: "Bearer  "},
		{name: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			token, ok := bearerToken(r)
			if token != tt.token || ok != tt.ok {
				t.Errorf("bearerToken = %q %v", token, ok)
			}
		})
	}
}
