package volume

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

const (
	defaultTokenExpiration int64 = 3600
	minTokenExpiration     int64 = 600
	// maxTokenAge bounds a token's use even when the apiserver extends
	// its expiry (service-account-extend-token-expiration).
	maxTokenAge = 24 * time.Hour
)

type tokenKey struct {
	podUID     types.UID
	namespace  string
	account    string
	audience   string
	expiration int64
}

type cachedToken struct {
	token     string
	issued    time.Time
	expires   time.Time
	refreshAt time.Time
}

// tokenSource requests service-account tokens bound to pods and keeps each
// until 80% of its life, or 24 hours, has passed. The lock is never held
// across the API call, so one pod's slow request delays no other pod.
type tokenSource struct {
	client kube.Interface
	clock  clock.PassiveClock

	mu    sync.Mutex
	cache map[tokenKey]cachedToken

	// lag is shared with the claims' reads (csiPlugin).
	lag authorizerLag
}

func newTokenSource(client kube.Interface, c clock.PassiveClock) *tokenSource {
	return &tokenSource{client: client, clock: c, cache: map[tokenKey]cachedToken{}}
}

// token returns a valid token for the projection, requesting a new one
// when the cached one is due.
func (s *tokenSource) token(ctx context.Context, pod *v1.Pod, p *v1.ServiceAccountTokenProjection) (string, error) {
	t, _, err := s.tokenExpiring(ctx, pod, p)
	return t, err
}

// tokenExpiring is token with the time the token expires.
func (s *tokenSource) tokenExpiring(ctx context.Context, pod *v1.Pod, p *v1.ServiceAccountTokenProjection) (string, time.Time, error) {
	exp := defaultTokenExpiration
	if p.ExpirationSeconds != nil {
		exp = *p.ExpirationSeconds
	}
	if exp < minTokenExpiration {
		return "", time.Time{}, fmt.Errorf("serviceAccountToken expirationSeconds %d is below the minimum of %d", exp, minTokenExpiration)
	}
	account := pod.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	key := tokenKey{podUID: pod.UID, namespace: pod.Namespace, account: account, audience: p.Audience, expiration: exp}

	now := s.clock.Now()
	s.mu.Lock()
	cached, ok := s.cache[key]
	s.mu.Unlock()
	if ok && now.Before(cached.refreshAt) {
		return cached.token, cached.expires, nil
	}
	if s.client == nil {
		return "", time.Time{}, fmt.Errorf("serviceAccountToken: no API client")
	}

	req := &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				APIVersion: "v1",
				Kind:       "Pod",
				Name:       pod.Name,
				UID:        pod.UID,
			},
		},
	}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	resp, err := s.createToken(ctx, pod, account, req, !ok)
	if err != nil {
		if ok && now.Before(cached.expires) {
			// The old token still works; try again next sync.
			return cached.token, cached.expires, nil
		}
		return "", time.Time{}, fmt.Errorf("request token for service account %s/%s: %w", pod.Namespace, account, err)
	}
	if resp.Status.Token == "" {
		return "", time.Time{}, fmt.Errorf("request token for service account %s/%s: empty token in response", pod.Namespace, account)
	}
	issued := s.clock.Now()
	expires := resp.Status.ExpirationTimestamp.Time
	if expires.IsZero() || !expires.After(issued) {
		expires = issued.Add(time.Duration(exp) * time.Second)
	}
	refresh := issued.Add(expires.Sub(issued) * 8 / 10)
	if limit := issued.Add(maxTokenAge); refresh.After(limit) {
		refresh = limit
	}
	s.mu.Lock()
	s.cache[key] = cachedToken{token: resp.Status.Token, issued: issued, expires: expires, refreshAt: refresh}
	s.mu.Unlock()
	return resp.Status.Token, expires, nil
}

// nextRefresh is when the pod's earliest token is due; false when the pod
// has none.
func (s *tokenSource) nextRefresh(uid types.UID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for k, t := range s.cache {
		if k.podUID == uid && (next.IsZero() || t.refreshAt.Before(next)) {
			next = t.refreshAt
		}
	}
	return next, !next.IsZero()
}

// forget drops the pod's tokens.
func (s *tokenSource) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.cache {
		if k.podUID == uid {
			delete(s.cache, k)
		}
	}
}

// createToken requests the token; a pod's first one is asked again after
// each of forbiddenRetries while the apiserver answers Forbidden.
func (s *tokenSource) createToken(ctx context.Context, pod *v1.Pod, account string, req *authenticationv1.TokenRequest, first bool) (*authenticationv1.TokenRequest, error) {
	create := func() (*authenticationv1.TokenRequest, error) {
		return s.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, account, req, metav1.CreateOptions{})
	}
	if !first {
		return create()
	}
	return whileForbidden(ctx, &s.lag, pod, create)
}
