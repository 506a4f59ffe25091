package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// Defaults of rotatorConfig.
const (
	// defaultIssueTimeout bounds the wait for one CSR, the kubelet's: a
	// CSR nobody approves is given up for a new one.
	defaultIssueTimeout = 15 * time.Minute
	// Retry delays after a failed rotation: doubling from the first to
	// the last, each up to retryJitter longer at random so that nodes
	// that failed together do not retry together.
	defaultRetryFirst = time.Second
	defaultRetryMax   = 5 * time.Minute
	retryJitter       = 0.2
	// templateCheckInterval is how often a template that can change (the
	// serving one, from the node's addresses) is looked at.
	templateCheckInterval = time.Second
)

// rotatorConfig configures a rotator.
type rotatorConfig struct {
	// Name tells the rotators apart in logs ("client", "serving").
	Name string
	// Store holds the pairs. Required.
	Store *pairStore
	// Template is the CSR to send: subject and names; nil means none can
	// be sent yet. Called at each rotation and, when Dynamic, every
	// templateCheckInterval. Required.
	Template func() *x509.CertificateRequest
	// Dynamic says Template's answer can change: a certificate that no
	// longer covers it is replaced at once.
	Dynamic bool
	// SignerName is the CSRs' signer. Required.
	SignerName string
	// Usages are the key usages to ask for with a key. Required.
	Usages func(key any) []certificatesv1.KeyUsage
	// Client is the client a CSR is sent with, given the current
	// certificate (nil when there is no valid one). Required.
	Client func(current *tls.Certificate) (kube.Interface, error)
	// SeedCertPEM and SeedKeyPEM, when the store has no valid pair, are
	// stored and used until a certificate of the rotator's own replaces
	// them, which is requested at once.
	SeedCertPEM, SeedKeyPEM []byte
	// IssueTimeout bounds the wait for one CSR; 0 means 15m.
	IssueTimeout time.Duration
	// RetryFirst and RetryMax bound the delays between failed rotations;
	// 0 means 1s and 5m.
	RetryFirst, RetryMax time.Duration
	// Clock is the rotator's time; nil means the real one.
	Clock clock.Clock
}

// rotator holds a certificate and replaces it through the certificates
// API before it expires: at a random point between 70 and 90 % of its
// life (so that nodes started together do not renew together), at once
// when there is none, it expired, it was a seed, or it no longer covers
// the template. Each rotation is a new ECDSA P-256 key and a new CSR; a
// failed one is retried after an exponential back-off.
type rotator struct {
	cfg   rotatorConfig
	clock clock.Clock

	mu      sync.RWMutex
	cert    *tls.Certificate
	healthy bool
	// deadline is when cert is to be renewed; zero means at once. Run's
	// goroutine writes it with cert, and alone reads it.
	deadline time.Time
	// requested is the template of the last CSR sent; Run's goroutine only.
	requested *x509.CertificateRequest
}

// newRotator loads the current pair, or stores the seed.
func newRotator(logger klog.Logger, cfg rotatorConfig) (*rotator, error) {
	switch {
	case cfg.Store == nil, cfg.Template == nil, cfg.SignerName == "", cfg.Usages == nil, cfg.Client == nil:
		return nil, errors.New("certs: a rotator needs a store, a template, a signer, usages and a client")
	}
	if cfg.IssueTimeout == 0 {
		cfg.IssueTimeout = defaultIssueTimeout
	}
	if cfg.RetryFirst == 0 {
		cfg.RetryFirst = defaultRetryFirst
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = defaultRetryMax
	}
	r := &rotator{cfg: cfg, clock: cfg.Clock}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	logger = klog.LoggerWithName(logger, cfg.Name)
	now := r.clock.Now()
	if cur := cfg.Store.load(logger); cur != nil && now.Before(cur.Leaf.NotAfter) {
		r.cert, r.deadline = cur, rotationDeadline(cur.Leaf, mathrand.Float64())
		return r, nil
	}
	if len(cfg.SeedCertPEM) == 0 || len(cfg.SeedKeyPEM) == 0 {
		return r, nil
	}
	seed, err := parsePair(cfg.SeedCertPEM, cfg.SeedKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("certs: %s seed certificate: %w", cfg.Name, err)
	}
	// Stored so that the kubeconfig's current.pem exists at once; the
	// seed is used from memory either way.
	if _, err := cfg.Store.update(cfg.SeedCertPEM, cfg.SeedKeyPEM, now); err != nil {
		logger.Error(err, "Failed to store the seed certificate")
	}
	r.cert = seed
	return r, nil
}

// Current is the certificate, nil when there is none or it expired.
func (r *rotator) Current() *tls.Certificate {
	r.mu.RLock()
	cert := r.cert
	r.mu.RUnlock()
	if cert == nil || !r.clock.Now().Before(cert.Leaf.NotAfter) {
		return nil
	}
	return cert
}

// ServerHealthy says whether the apiserver answered the last CSR sent
// (a refusal is an answer too) or issued the last certificate: whether a
// lack of a certificate is the apiserver's verdict rather than its
// absence.
func (r *rotator) ServerHealthy() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.healthy
}

// Run rotates until ctx ends.
func (r *rotator) Run(ctx context.Context) {
	logger := klog.LoggerWithName(klog.FromContext(ctx), r.cfg.Name)
	ctx = klog.NewContext(ctx, logger)
	failures := 0
	for {
		tmpl := r.cfg.Template()
		wait, ok := untilRotation(r.cert, r.deadline, r.requested, tmpl, r.clock.Now())
		switch {
		case !ok:
			wait = templateCheckInterval
		case r.cfg.Dynamic:
			wait = min(wait, templateCheckInterval)
		}
		if wait > 0 {
			if !r.sleep(ctx, wait) {
				return
			}
			continue
		}
		err := r.rotate(ctx, tmpl)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			failures = 0
			continue
		case errors.Is(err, errTemplateChanged):
			// Not a failure: the next request is for the new template.
			logger.Info("Certificate template changed; giving up the pending request for a new one")
			continue
		}
		failures++
		delay := retryDelay(failures, r.cfg.RetryFirst, r.cfg.RetryMax, mathrand.Float64())
		logger.Error(err, "Failed to rotate the certificate", "retryIn", delay)
		if !r.sleep(ctx, delay) {
			return
		}
	}
}

func (r *rotator) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-r.clock.After(d):
		return true
	}
}

// rotate requests a certificate for tmpl with a new key, waits for it and
// stores it.
func (r *rotator) rotate(ctx context.Context, tmpl *x509.CertificateRequest) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	csrPEM, err := makeCSR(key, tmpl)
	if err != nil {
		return err
	}
	client, err := r.cfg.Client(r.Current())
	if err != nil {
		return fmt.Errorf("build client: %w", err)
	}
	csrs := client.CertificatesV1().CertificateSigningRequests()
	csr, err := sendCSR(ctx, csrs, csrRequest{signerName: r.cfg.SignerName, usages: r.cfg.Usages(key), csrPEM: csrPEM, key: key})
	if err != nil {
		r.mu.Lock()
		r.healthy = serverAnswered(err)
		r.mu.Unlock()
		return err
	}
	r.requested = tmpl
	klog.FromContext(ctx).V(2).Info("Waiting for the certificate signing request to be issued", "csr", csr.Name)
	certPEM, err := r.wait(ctx, csrs, csr, tmpl)
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	cert, err := r.cfg.Store.update(certPEM, keyPEM, r.clock.Now())
	if err != nil {
		return err
	}
	deadline := rotationDeadline(cert.Leaf, mathrand.Float64())
	r.mu.Lock()
	r.cert, r.deadline, r.healthy = cert, deadline, true
	r.mu.Unlock()
	klog.FromContext(ctx).Info("Certificate rotated", "csr", csr.Name, "expires", cert.Leaf.NotAfter, "renewAt", deadline)
	return nil
}

// errTemplateChanged ends the wait for a CSR that no longer asks for
// what is wanted.
var errTemplateChanged = errors.New("the certificate template changed")

// wait waits for the CSR for at most IssueTimeout and, with a dynamic
// template, until the template changes from tmpl.
func (r *rotator) wait(ctx context.Context, csrs csrClient, csr *certificatesv1.CertificateSigningRequest, tmpl *x509.CertificateRequest) ([]byte, error) {
	ctx, cancelTimeout := context.WithTimeout(ctx, r.cfg.IssueTimeout)
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil) // ends the template check before it is waited for
	if r.cfg.Dynamic {
		wg.Go(func() {
			for r.sleep(ctx, templateCheckInterval) {
				if !sameTemplate(r.cfg.Template(), tmpl) {
					cancel(errTemplateChanged)
					return
				}
			}
		})
	}
	return waitForCertificate(ctx, csrs, csr, csrPollInterval)
}

// untilRotation is how long to wait before requesting a certificate for
// tmpl (0: now), given the current one, its renewal deadline and the
// template last requested; ok is false while there is no template.
func untilRotation(cert *tls.Certificate, deadline time.Time, requested, tmpl *x509.CertificateRequest, now time.Time) (wait time.Duration, ok bool) {
	switch {
	case tmpl == nil:
		return 0, false
	case cert == nil || !now.Before(cert.Leaf.NotAfter) || !now.Before(deadline):
		return 0, true
	// Once per change of template: a signer that leaves a name out would
	// otherwise be asked again and again.
	case !covers(cert.Leaf, tmpl) && !sameTemplate(requested, tmpl):
		return 0, true
	}
	return deadline.Sub(now), true
}

// rotationDeadline is when a certificate is renewed: at 70 % of its life
// plus r (in [0, 1)) times 20 %.
func rotationDeadline(leaf *x509.Certificate, r float64) time.Time {
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotBefore.Add(life/10*7 + time.Duration(float64(life/5)*r))
}

// retryDelay is the wait after the n-th failure in a row (n ≥ 1): first
// doubled n-1 times, at most max, then up to retryJitter longer by r (in
// [0, 1)).
func retryDelay(n int, first, max time.Duration, r float64) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d + time.Duration(float64(d)*retryJitter*r)
}

// serverAnswered says whether a failed CSR creation was an answer of the
// apiserver's, as the kubelet reads it: a refusal (Unauthorized, which
// TLS-terminating proxies also send, Forbidden, NotFound) is one; an
// error from something in between, or no answer, is not.
func serverAnswered(err error) bool {
	switch {
	case apierrors.IsUnauthorized(err):
		return true
	case apierrors.IsUnexpectedServerError(err):
		return false
	}
	return apierrors.IsForbidden(err) || apierrors.IsNotFound(err)
}

// covers says whether the certificate has the template's common name
// and every one of its organizations, DNS names and IPs (more is fine).
func covers(leaf *x509.Certificate, tmpl *x509.CertificateRequest) bool {
	if leaf.Subject.CommonName != tmpl.Subject.CommonName {
		return false
	}
	for _, o := range tmpl.Subject.Organization {
		if !slices.Contains(leaf.Subject.Organization, o) {
			return false
		}
	}
	for _, d := range tmpl.DNSNames {
		if !slices.Contains(leaf.DNSNames, d) {
			return false
		}
	}
	for _, ip := range tmpl.IPAddresses {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// sameTemplate compares what a CSR built from each would ask for.
func sameTemplate(a, b *x509.CertificateRequest) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Subject.CommonName == b.Subject.CommonName &&
		slices.Equal(a.Subject.Organization, b.Subject.Organization) &&
		slices.Equal(a.DNSNames, b.DNSNames) &&
		slices.EqualFunc(a.IPAddresses, b.IPAddresses, net.IP.Equal)
}
