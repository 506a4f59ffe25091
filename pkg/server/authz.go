package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Subresources of nodes that requests to the node API are authorized as.
const (
	subresourceProxy = "proxy"
	resourceNodes    = "nodes"
)

// specificSubresources are the paths with their own subresource of nodes;
// everything else is nodes/proxy. Order matters only for readability: the
// prefixes do not overlap.
var specificSubresources = []struct{ prefix, subresource string }{
	{"/stats", "stats"},
	{"/metrics", "metrics"},
	{"/logs", "log"},
	{"/checkpoint", "checkpoint"},
	{"/statusz", "statusz"},
	{"/flagz", "configz"},
}

// fineGrained are read-only paths that first ask for a narrow permission and
// fall back to nodes/proxy, so that monitoring can be given, say,
// nodes/healthz without the power of nodes/proxy.
var fineGrained = []struct{ prefix, subresource string }{
	{"/allocatedPods", "pods"},
	{"/pods", "pods"},
	{"/healthz", "healthz"},
	{"/configz", "configz"},
	{"/runningpods", "pods"},
}

// streamingPaths open a stream into a container. A GET there can only be
// an upgrade to SPDY or WebSocket that runs a command or moves data, so it
// is authorized as create, not get: nodes/proxy get must stay read-only.
var streamingPaths = []string{"/exec", "/attach", "/portForward"}

// requestAttributes maps a request to the verb and the subresources of
// nodes to check, in order; the first one allowed lets the request in.
// The verb is "" for methods with no verb.
func requestAttributes(method, path string) (verb string, subresources []string) {
	switch method {
	case http.MethodGet, http.MethodHead:
		verb = "get"
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	if verb == "get" {
		for _, p := range streamingPaths {
			if isSubpath(path, p) {
				verb = "create"
			}
		}
	}
	for _, f := range fineGrained {
		if isSubpath(path, f.prefix) {
			subresources = append(subresources, f.subresource)
			break
		}
	}
	for _, s := range specificSubresources {
		if isSubpath(path, s.prefix) {
			return verb, append(subresources, s.subresource)
		}
	}
	return verb, append(subresources, subresourceProxy)
}

// isSubpath reports whether p is prefix itself or below it.
func isSubpath(p, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// sarCreator sends SubjectAccessReviews; client-go's client is one.
type sarCreator interface {
	Create(ctx context.Context, sar *authzv1.SubjectAccessReview, opts metav1.CreateOptions) (*authzv1.SubjectAccessReview, error)
}

type sarEntry struct {
	allowed bool
	reason  string
	expires time.Time
}

// authorizer decides whether a user may do verb on nodes/<node>/<sub>.
type authorizer struct {
	alwaysAllow bool
	nodeName    string
	reviewer    sarCreator
	allowTTL    time.Duration
	denyTTL     time.Duration
	now         func() time.Time

	flight  singleflight.Group
	mu      sync.Mutex
	entries map[string]sarEntry
}

func newAuthorizer(cfg Config) (*authorizer, error) {
	switch cfg.AuthorizationMode {
	case AuthorizationModeAlwaysAllow:
		return &authorizer{alwaysAllow: true}, nil
	case AuthorizationModeWebhook:
		if cfg.Client == nil {
			return nil, errors.New("authorization mode Webhook needs an apiserver client")
		}
		return &authorizer{
			nodeName: cfg.NodeName,
			reviewer: cfg.Client.AuthorizationV1().SubjectAccessReviews(),
			allowTTL: cfg.AuthorizedCacheTTL,
			denyTTL:  cfg.UnauthorizedCacheTTL,
			now:      time.Now,
			entries:  map[string]sarEntry{},
		}, nil
	default:
		return nil, fmt.Errorf("authorization mode %q is not one of %s, %s", cfg.AuthorizationMode, AuthorizationModeWebhook, AuthorizationModeAlwaysAllow)
	}
}

// authorize asks the apiserver, or its cache, whether u may do verb on the
// node's subresource. An error means the question could not be answered.
func (a *authorizer) authorize(ctx context.Context, u *userInfo, verb, subresource string) (bool, string, error) {
	if a.alwaysAllow {
		return true, "", nil
	}
	spec := authzv1.SubjectAccessReviewSpec{
		User:   u.Name,
		UID:    u.UID,
		Groups: u.Groups,
		ResourceAttributes: &authzv1.ResourceAttributes{
			Verb:        verb,
			Version:     "v1",
			Resource:    resourceNodes,
			Subresource: subresource,
			Name:        a.nodeName,
		},
	}
	if len(u.Extra) > 0 {
		spec.Extra = make(map[string]authzv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			spec.Extra[k] = v
		}
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return false, "", fmt.Errorf("encode access review: %w", err)
	}
	sum := sha256.Sum256(raw)
	key := hex.EncodeToString(sum[:])
	if e, ok := a.lookup(key); ok {
		return e.allowed, e.reason, nil
	}
	v, err, _ := a.flight.Do(key, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		res, err := a.reviewer.Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("subject access review: %w", err)
		}
		e := sarEntry{allowed: res.Status.Allowed && !res.Status.Denied, reason: res.Status.Reason}
		ttl := a.denyTTL
		if e.allowed {
			ttl = a.allowTTL
		}
		e.expires = a.now().Add(ttl)
		a.store(key, e)
		return e, nil
	})
	if err != nil {
		return false, "", err
	}
	e := v.(sarEntry)
	return e.allowed, e.reason, nil
}

func (a *authorizer) lookup(key string) (sarEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.entries[key]
	if !ok {
		return sarEntry{}, false
	}
	if !a.now().Before(e.expires) {
		delete(a.entries, key)
		return sarEntry{}, false
	}
	return e, true
}

func (a *authorizer) store(key string, e sarEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	makeRoom(a.entries, a.now(), func(e sarEntry) time.Time { return e.expires })
	a.entries[key] = e
}
