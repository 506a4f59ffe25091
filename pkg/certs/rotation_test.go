package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

func TestRotationDeadline(t *testing.T) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: nb, NotAfter: nb.Add(100 * time.Hour)}
	tests := []struct {
		r    float64
		want time.Duration
	}{
		{r: 0, want: 70 * time.Hour},
		{r: 0.5, want: 80 * time.Hour},
		{r: 0.75, want: 85 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.r), func(t *testing.T) {
			if got := rotationDeadline(leaf, tt.r).Sub(nb); got != tt.want {
				t.Errorf("deadline at %v of life, want %v", got, tt.want)
			}
		})
	}
	if got := rotationDeadline(leaf, 0.999999).Sub(nb); got >= 90*time.Hour || got < 89*time.Hour {
		t.Errorf("deadline for r→1 at %v, want just under 90h", got)
	}
}

// TestRotatorDeadlineIsJittered loads the same certificate into many
// rotators: each renews it between 70 and 90 % of its life, and not all
// at the same point.
func TestRotatorDeadlineIsJittered(t *testing.T) {
	ca := newTestCA(t)
	store := newPairStore(t.TempDir(), clientPrefix, "", "")
	certPEM, keyPEM := ca.issue(t, "system:node:node-1", 10*time.Hour)
	cert, err := store.update(certPEM, keyPEM, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	nb, life := cert.Leaf.NotBefore, cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)
	seen := map[time.Time]bool{}
	for range 200 {
		r, err := newRotator(klog.Background(), testRotatorConfig(store, nil))
		if err != nil {
			t.Fatal(err)
		}
		if r.Current() == nil || r.Current().Leaf.SerialNumber.Cmp(cert.Leaf.SerialNumber) != 0 {
			t.Fatal("the stored certificate was not loaded")
		}
		at := float64(r.deadline.Sub(nb)) / float64(life)
		if at < 0.7 || at > 0.9 {
			t.Fatalf("renewal at %.3f of the certificate's life, want 0.7–0.9", at)
		}
		seen[r.deadline] = true
	}
	if len(seen) < 100 {
		t.Errorf("%d distinct deadlines in 200 rotators: not jittered", len(seen))
	}
}

func TestUntilRotation(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tmpl := servingTemplate("node-1", nodeAddresses("10.0.0.5"))
	moved := servingTemplate("node-1", nodeAddresses("10.0.0.6"))
	valid := &tls.Certificate{Leaf: &x509.Certificate{
		Subject: nodeSubject("node-1"), IPAddresses: []net.IP{net.ParseIP("10.0.0.5")}, DNSNames: []string{"node-1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
	}}
	deadline := now.Add(30 * time.Minute)
	tests := []struct {
		name      string
		cert      *tls.Certificate
		deadline  time.Time
		requested *x509.CertificateRequest
		tmpl      *x509.CertificateRequest
		want      time.Duration
		wantOK    bool
	}{
		{name: "no template yet", cert: nil, tmpl: nil, wantOK: false},
		{name: "no certificate", cert: nil, tmpl: tmpl, want: 0, wantOK: true},
		{name: "valid, before the deadline", cert: valid, deadline: deadline, tmpl: tmpl, want: 30 * time.Minute, wantOK: true},
		{name: "valid, past the deadline", cert: valid, deadline: now.Add(-time.Second), tmpl: tmpl, want: 0, wantOK: true},
		{name: "a seed (zero deadline)", cert: valid, tmpl: tmpl, want: 0, wantOK: true},
		{name: "expired", cert: &tls.Certificate{Leaf: &x509.Certificate{Subject: nodeSubject("node-1"), NotAfter: now}}, deadline: now.Add(time.Hour), tmpl: tmpl, want: 0, wantOK: true},
		{name: "template changed", cert: valid, deadline: deadline, requested: tmpl, tmpl: moved, want: 0, wantOK: true},
		{name: "template changed, already requested", cert: valid, deadline: deadline, requested: moved, tmpl: moved, want: 30 * time.Minute, wantOK: true},
		{name: "certificate with more names than the template", cert: valid, deadline: deadline,
			tmpl: &x509.CertificateRequest{Subject: nodeSubject("node-1")}, want: 30 * time.Minute, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := untilRotation(tt.cert, tt.deadline, tt.requested, tt.tmpl, now)
			if ok != tt.wantOK || ok && got != tt.want {
				t.Errorf("untilRotation = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	tests := []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{n: 1, r: 0, want: time.Second},
		{n: 1, r: 0.5, want: 1100 * time.Millisecond},
		{n: 2, r: 0, want: 2 * time.Second},
		{n: 5, r: 0, want: 16 * time.Second},
		{n: 9, r: 0, want: 256 * time.Second},
		{n: 10, r: 0, want: 5 * time.Minute},
		{n: 1000, r: 0, want: 5 * time.Minute},
		{n: 1000, r: 0.5, want: 330 * time.Second},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d,%v", tt.n, tt.r), func(t *testing.T) {
			if got := retryDelay(tt.n, time.Second, 5*time.Minute, tt.r); got != tt.want {
				t.Errorf("retryDelay = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestServerAnswered(t *testing.T) {
	gr := schema.GroupResource{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "forbidden", err: apierrors.NewForbidden(gr, "", errors.New("no")), want: true},
		{name: "unauthorized", err: apierrors.NewUnauthorized("who"), want: true},
		{name: "not found", err: apierrors.NewNotFound(gr, "x"), want: true},
		{name: "wrapped forbidden", err: fmt.Errorf("create: %w", apierrors.NewForbidden(gr, "", errors.New("no"))), want: true},
		{name: "internal error", err: apierrors.NewInternalError(errors.New("etcd")), want: false},
		{name: "proxy garbage", err: apierrors.NewGenericServerResponse(502, "POST", gr, "", "bad gateway", 0, true), want: false},
		{name: "connection refused", err: errors.New("dial tcp: connection refused"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serverAnswered(tt.err); got != tt.want {
				t.Errorf("serverAnswered = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRotatorSeed: without a stored pair, the seed is stored and used,
// and replaced at once; a stored valid pair wins over the seed.
func TestRotatorSeed(t *testing.T) {
	ca := newTestCA(t)
	seedCert, seedKey := ca.issue(t, "system:node:node-1", time.Hour)
	store := newPairStore(t.TempDir(), clientPrefix, "", "")
	cfg := testRotatorConfig(store, nil)
	cfg.SeedCertPEM, cfg.SeedKeyPEM = seedCert, seedKey
	r, err := newRotator(klog.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Current() == nil || r.Current().Leaf.SerialNumber.String() != serialOf(t, seedCert) {
		t.Fatal("the seed is not the current certificate")
	}
	if wait, ok := untilRotation(r.cert, r.deadline, r.requested, cfg.Template(), time.Now()); !ok || wait != 0 {
		t.Errorf("a seed is renewed in %v, want at once", wait)
	}
	if stored := store.load(klog.Background()); stored == nil || stored.Leaf.SerialNumber.String() != serialOf(t, seedCert) {
		t.Error("the seed was not stored")
	}

	ownCert, ownKey := ca.issue(t, "system:node:node-1", time.Hour)
	if _, err := store.update(ownCert, ownKey, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if r, err = newRotator(klog.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if r.Current().Leaf.SerialNumber.String() != serialOf(t, ownCert) || r.deadline.IsZero() {
		t.Error("the seed replaced a valid stored pair")
	}
}

// waitRecorder is a fake clock that reports each wait started on it,
// once registered, so a test steps the clock when the rotator sleeps.
type waitRecorder struct {
	*clocktesting.FakeClock
	waits chan time.Duration
}

func (c *waitRecorder) After(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.After(d)
	c.waits <- d
	return ch
}

// next is the next wait the rotator starts; the test fails if it starts
// none within 10s.
func (c *waitRecorder) next(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.waits:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the rotator started no wait within 10s")
		return 0
	}
}

func testRotatorConfig(store *pairStore, client kube.Interface) rotatorConfig {
	return rotatorConfig{
		Name:       "client",
		Store:      store,
		Template:   func() *x509.CertificateRequest { return &x509.CertificateRequest{Subject: nodeSubject("node-1")} },
		SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages:     ClientUsages,
		Client:     func(*tls.Certificate) (kube.Interface, error) { return client, nil },
	}
}

// runRotator runs r until the test ends.
func runRotator(t *testing.T, r *rotator) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestRotatorRetriesAfterDenied: a denied CSR leaves the node without a
// certificate and is retried after the first back-off delay with a new
// key; the issued certificate is stored and renewed at its deadline.
func TestRotatorRetriesAfterDenied(t *testing.T) {
	ca := newTestCA(t)
	client, signer := newSignerClient(t, ca, time.Hour)
	signer.setVerdict(func(n int) certificatesv1.RequestConditionType {
		if n == 0 {
			return certificatesv1.CertificateDenied
		}
		return certificatesv1.CertificateApproved
	})
	clk := &waitRecorder{FakeClock: clocktesting.NewFakeClock(time.Now()), waits: make(chan time.Duration, 4)}
	store := newPairStore(t.TempDir(), clientPrefix, "", "")
	cfg := testRotatorConfig(store, kubetest.Wrap(client))
	cfg.Clock = clk
	r, err := newRotator(klog.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runRotator(t, r)

	retry := clk.next(t)
	if retry < time.Second || retry > 1200*time.Millisecond {
		t.Errorf("retry after a denied CSR in %v, want 1s–1.2s", retry)
	}
	if n := len(signer.sent()); n != 1 {
		t.Fatalf("%d CSRs before the retry, want 1", n)
	}
	if r.Current() != nil {
		t.Fatal("a certificate from a denied CSR")
	}
	if r.ServerHealthy() {
		t.Error("server healthy before any certificate or refusal")
	}

	clk.Step(retry)
	renew := clk.next(t)
	sent := signer.sent()
	if len(sent) != 2 {
		t.Fatalf("%d CSRs after the retry, want 2", len(sent))
	}
	if string(sent[0].Spec.Request) == string(sent[1].Spec.Request) {
		t.Error("the retry sent the same request")
	}
	cur := r.Current()
	if cur == nil {
		t.Fatal("no certificate after the retry")
	}
	csr, err := parseCSR(sent[1].Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	if !publicKeysEqual(csr.PublicKey, cur.Leaf.PublicKey) {
		t.Error("the certificate is not for the retried request's key")
	}
	if !r.ServerHealthy() {
		t.Error("server not healthy after a certificate was issued")
	}
	if stored := store.load(klog.Background()); stored == nil || stored.Leaf.SerialNumber.Cmp(cur.Leaf.SerialNumber) != 0 {
		t.Error("the certificate was not stored")
	}
	life := cur.Leaf.NotAfter.Sub(cur.Leaf.NotBefore)
	if renew < life*6/10 || renew > life*9/10 {
		t.Errorf("renewal in %v of a %v certificate, want at 70–90 %% of its life", renew, life)
	}
}

// TestRotatorFollowsTheTemplate: a serving rotator sends nothing while
// the node has no IP, and gives up a pending CSR for a new one when the
// node's addresses change.
func TestRotatorFollowsTheTemplate(t *testing.T) {
	ca := newTestCA(t)
	client, signer := newSignerClient(t, ca, time.Hour)
	signer.setVerdict(func(int) certificatesv1.RequestConditionType { return "" }) // nobody approves
	var mu sync.Mutex
	var ips []string
	setIPs := func(v ...string) { mu.Lock(); ips = v; mu.Unlock() }
	clk := &waitRecorder{FakeClock: clocktesting.NewFakeClock(time.Now()), waits: make(chan time.Duration, 4)}
	r, err := newRotator(klog.Background(), rotatorConfig{
		Name:  "serving",
		Store: newPairStore(filepath.Join(t.TempDir(), "pki"), servingPrefix, "", ""),
		Template: func() *x509.CertificateRequest {
			mu.Lock()
			defer mu.Unlock()
			return servingTemplate("node-1", nodeAddresses(ips...))
		},
		Dynamic:    true,
		SignerName: certificatesv1.KubeletServingSignerName,
		Usages:     servingUsages,
		Client:     func(*tls.Certificate) (kube.Interface, error) { return kubetest.Wrap(client), nil },
		Clock:      clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	runRotator(t, r)
	requestedIPs := func() []string {
		var out []string
		for _, c := range signer.sent() {
			req, err := parseCSR(c.Spec.Request)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(req.IPAddresses))
		}
		return out
	}

	if got := clk.next(t); got != templateCheckInterval {
		t.Fatalf("without a template waits %v, want %v", got, templateCheckInterval)
	}
	if n := len(signer.sent()); n != 0 {
		t.Fatalf("%d CSRs without an IP", n)
	}
	setIPs("10.0.0.5")
	clk.Step(templateCheckInterval)
	clk.next(t) // the template check while the CSR is pending
	if got := requestedIPs(); len(got) != 1 || got[0] != "[10.0.0.5]" {
		t.Fatalf("CSRs for %v, want one for [10.0.0.5]", got)
	}
	clk.Step(templateCheckInterval) // same template: still waiting
	clk.next(t)
	if n := len(signer.sent()); n != 1 {
		t.Fatalf("%d CSRs with an unchanged template", n)
	}
	setIPs("10.0.0.6")
	clk.Step(templateCheckInterval)
	clk.next(t) // the check of the new CSR
	if got := requestedIPs(); len(got) != 2 || got[1] != "[10.0.0.6]" {
		t.Fatalf("CSRs for %v, want a second one for [10.0.0.6]", got)
	}
}

// nodeAddresses are node-1's addresses with the given internal IPs.
func nodeAddresses(ips ...string) []v1.NodeAddress {
	out := []v1.NodeAddress{{Type: v1.NodeHostName, Address: "node-1"}}
	for _, ip := range ips {
		out = append(out, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	return out
}
