package server

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/certs"
)

// Well-known identities and groups of Kubernetes authentication.
const (
	anonymousUser       = "system:anonymous"
	unauthenticatedGrp  = "system:unauthenticated"
	authenticatedGrp    = "system:authenticated"
	authorizationHeader = "Authorization"
)

// errUnauthorized is returned when a request carries no usable credentials.
var errUnauthorized = errors.New("unauthorized")

// userInfo is who a request comes from.
type userInfo struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// tokenReviewer sends TokenReviews; client-go's TokenReviews() client is one.
type tokenReviewer interface {
	Create(ctx context.Context, review *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)
}

// authenticator tells who sent a request: an x509 client certificate signed
// by the client CA, then a bearer token checked by TokenReview, then, if
// allowed, nobody in particular.
type authenticator struct {
	// clientCAs is the client CA bundle, reloaded when its file changes;
	// nil without one.
	clientCAs *certs.CABundleFile
	tokens    *tokenCache
	anonymous bool
	now       func() time.Time
}

func newAuthenticator(cfg Config, metrics *serverMetrics) (*authenticator, error) {
	a := &authenticator{anonymous: cfg.AnonymousEnabled, now: time.Now}
	if cfg.ClientCAFile != "" {
		cas, err := certs.NewCABundleFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("clientCAFile: %w", err)
		}
		a.clientCAs = cas
	}
	if cfg.WebhookAuthenticationEnabled {
		if cfg.Client == nil {
			return nil, errors.New("webhook authentication needs an apiserver client")
		}
		a.tokens = newTokenCache(tokenCacheConfig{
			reviewer:   cfg.Client.AuthenticationV1().TokenReviews(),
			successTTL: cfg.TokenCacheTTL,
			failureTTL: cfg.TokenCacheTTL,
			limit:      newTokenBucket(cfg.TokenReviewQPS, cfg.TokenReviewBurst, time.Now),
			metrics:    metrics,
		})
	}
	return a, nil
}

// authenticate returns the request's user, or an error wrapping
// errUnauthorized. A credential that is present but bad is refused even when
// anonymous requests are allowed, as the kubelet does.
func (a *authenticator) authenticate(r *http.Request) (*userInfo, error) {
	var errs []error
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		u, err := a.fromCertificate(r.TLS.PeerCertificates)
		if err == nil {
			return u, nil
		}
		errs = append(errs, err)
	}
	if token, ok := bearerToken(r); ok {
		if a.tokens == nil {
			errs = append(errs, errors.New("bearer token given but webhook authentication is off"))
		} else {
			u, err := a.tokens.review(r.Context(), token)
			if err == nil {
				return withAuthenticatedGroup(u), nil
			}
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", errUnauthorized, errors.Join(errs...))
	}
	if a.anonymous {
		return &userInfo{Name: anonymousUser, Groups: []string{unauthenticatedGrp}}, nil
	}
	return nil, fmt.Errorf("%w: no client certificate or bearer token", errUnauthorized)
}

func (a *authenticator) fromCertificate(chain []*x509.Certificate) (*userInfo, error) {
	if a.clientCAs == nil {
		return nil, errors.New("client certificate given but no clientCAFile is configured")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	leaf := chain[0]
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         a.clientCAs.Pool(),
		Intermediates: inter,
		CurrentTime:   a.now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("verify client certificate %q: %w", leaf.Subject.CommonName, err)
	}
	if leaf.Subject.CommonName == "" {
		return nil, errors.New("client certificate has no common name")
	}
	groups := slices.Clone(leaf.Subject.Organization)
	return withAuthenticatedGroup(&userInfo{Name: leaf.Subject.CommonName, Groups: groups}), nil
}

// bearerToken reads "Authorization: Bearer <token>".
func bearerToken(r *http.Request) (string, bool) {
	h := strings.TrimSpace(r.Header.Get(authorizationHeader))
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func withAuthenticatedGroup(u *userInfo) *userInfo {
	if slices.Contains(u.Groups, authenticatedGrp) {
		return u
	}
	c := *u
	c.Groups = append(slices.Clone(u.Groups), authenticatedGrp)
	return &c
}
