package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

func TestRequestAttributes(t *testing.T) {
	tests := []struct {
		name         string
		method, path string
		verb         string
		subresources []string
	}{
		{name: "stats summary", method: "GET", path: "/stats/summary", verb: "get", subresources: []string{"stats"}},
		{name: "stats root", method: "GET", path: "/stats", verb: "get", subresources: []string{"stats"}},
		{name: "metrics", method: "GET", path: "/metrics", verb: "get", subresources: []string{"metrics"}},
		{name: "metrics resource", method: "GET", path: "/metrics/resource", verb: "get", subresources: []string{"metrics"}},
		{name: "system logs", method: "GET", path: "/logs/syslog", verb: "get", subresources: []string{"log"}},
		{name: "checkpoint", method: "POST", path: "/checkpoint/ns/pod/c", verb: "create", subresources: []string{"checkpoint"}},
		{name: "statusz", method: "GET", path: "/statusz", verb: "get", subresources: []string{"statusz"}},
		{name: "flagz is configz", method: "GET", path: "/flagz", verb: "get", subresources: []string{"configz"}},
		{name: "pods falls back to proxy", method: "GET", path: "/pods", verb: "get", subresources: []string{"pods", "proxy"}},
		{name: "pods trailing slash", method: "GET", path: "/pods/", verb: "get", subresources: []string{"pods", "proxy"}},
		{name: "runningpods", method: "GET", path: "/runningpods/", verb: "get", subresources: []string{"pods", "proxy"}},
		{name: "healthz", method: "GET", path: "/healthz", verb: "get", subresources: []string{"healthz", "proxy"}},
		{name: "configz", method: "GET", path: "/configz", verb: "get", subresources: []string{"configz", "proxy"}},
		{name: "metrics probes", method: "GET", path: "/metrics/probes", verb: "get", subresources: []string{"metrics"}},
		{name: "pprof is proxy", method: "GET", path: "/debug/pprof/heap", verb: "get", subresources: []string{"proxy"}},
		{name: "head is get", method: "HEAD", path: "/healthz", verb: "get", subresources: []string{"healthz", "proxy"}},
		{name: "container logs are proxy", method: "GET", path: "/containerLogs/ns/pod/c", verb: "get", subresources: []string{"proxy"}},
		{name: "exec over GET upgrade is create", method: "GET", path: "/exec/ns/pod/c", verb: "create", subresources: []string{"proxy"}},
		{name: "exec over POST", method: "POST", path: "/exec/ns/pod/c", verb: "create", subresources: []string{"proxy"}},
		{name: "attach over GET is create", method: "GET", path: "/attach/ns/pod/uid/c", verb: "create", subresources: []string{"proxy"}},
		{name: "portForward over GET is create", method: "GET", path: "/portForward/ns/pod", verb: "create", subresources: []string{"proxy"}},
		{name: "run", method: "POST", path: "/run/ns/pod/c", verb: "create", subresources: []string{"proxy"}},
		{name: "prefix is not a subpath", method: "GET", path: "/statsfoo", verb: "get", subresources: []string{"proxy"}},
		{name: "podsx is not pods", method: "GET", path: "/podsx", verb: "get", subresources: []string{"proxy"}},
		{name: "execute is not exec", method: "GET", path: "/execute", verb: "get", subresources: []string{"proxy"}},
		{name: "put", method: "PUT", path: "/x", verb: "update", subresources: []string{"proxy"}},
		{name: "patch", method: "PATCH", path: "/x", verb: "patch", subresources: []string{"proxy"}},
		{name: "delete", method: "DELETE", path: "/x", verb: "delete", subresources: []string{"proxy"}},
		{name: "options has no verb", method: "OPTIONS", path: "/x", verb: "", subresources: []string{"proxy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verb, subs := requestAttributes(tt.method, tt.path)
			if verb != tt.verb || !slices.Equal(subs, tt.subresources) {
				t.Errorf("requestAttributes(%s %s) = %q %v, want %q %v", tt.method, tt.path, verb, subs, tt.verb, tt.subresources)
			}
		})
	}
}

// sarClient answers SubjectAccessReviews with allow(spec) and counts them.
func sarClient(calls *atomic.Int32, allow func(authzv1.SubjectAccessReviewSpec) bool) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		out := sar.DeepCopy()
		out.Status.Allowed = allow(sar.Spec)
		if !out.Status.Allowed {
			out.Status.Reason = "no RBAC policy matched"
		}
		return true, out, nil
	})
	return c
}

func TestAuthorizerCachesAnswers(t *testing.T) {
	var calls atomic.Int32
	var seen authzv1.SubjectAccessReviewSpec
	client := sarClient(&calls, func(s authzv1.SubjectAccessReviewSpec) bool {
		seen = s
		return s.ResourceAttributes.Subresource == "log"
	})
	now := time.Unix(1000, 0)
	a, err := newAuthorizer(Config{AuthorizationMode: AuthorizationModeWebhook, Client: kubetest.Wrap(client), NodeName: "node-1",
		AuthorizedCacheTTL: time.Minute, UnauthorizedCacheTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a.now = func() time.Time { return now }
	u := &userInfo{Name: "alice", Groups: []string{"dev", authenticatedGrp}}
	ctx := context.Background()

	check := func(sub string, want bool, wantCalls int32) {
		t.Helper()
		ok, _, err := a.authorize(ctx, u, "get", sub)
		if err != nil || ok != want || calls.Load() != wantCalls {
			t.Fatalf("authorize %s = %v, %v after %d reviews; want %v after %d", sub, ok, err, calls.Load(), want, wantCalls)
		}
	}
	check("log", true, 1)
	ra := seen.ResourceAttributes
	if seen.User != "alice" || ra.Resource != "nodes" || ra.Name != "node-1" || ra.Verb != "get" || ra.Version != "v1" {
		t.Errorf("review spec = %+v %+v", seen, ra)
	}
	check("log", true, 1)
	check("proxy", false, 2)
	check("proxy", false, 2)
	now = now.Add(11 * time.Second) // denial expired, allowance not
	check("proxy", false, 3)
	check("log", true, 3)
	now = now.Add(time.Minute)
	check("log", true, 4)
}

func TestAuthorizerReviewError(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver down")
	})
	a, err := newAuthorizer(Config{AuthorizationMode: AuthorizationModeWebhook, Client: kubetest.Wrap(client), NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.authorize(context.Background(), &userInfo{Name: "bob"}, "get", "proxy"); err == nil {
		t.Fatal("error not reported")
	}
}

func TestNewAuthorizerModes(t *testing.T) {
	if _, err := newAuthorizer(Config{AuthorizationMode: "RBAC"}); err == nil {
		t.Error("unknown mode accepted")
	}
	if _, err := newAuthorizer(Config{AuthorizationMode: AuthorizationModeWebhook}); err == nil {
		t.Error("Webhook without a client accepted")
	}
	a, err := newAuthorizer(Config{AuthorizationMode: AuthorizationModeAlwaysAllow})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := a.authorize(context.Background(), &userInfo{Name: anonymousUser}, "create", "proxy"); !ok {
		t.Error("AlwaysAllow denied")
	}
}

func TestWithAuthDecisions(t *testing.T) {
	// alice may read nodes/pods only; bob may do anything on nodes/proxy.
	var calls atomic.Int32
	client := sarClient(&calls, func(s authzv1.SubjectAccessReviewSpec) bool {
		ra := s.ResourceAttributes
		switch s.User {
		case "alice":
			return ra.Subresource == "pods" && ra.Verb == "get"
		case "bob":
			return ra.Subresource == "proxy"
		}
		return false
	})
	authz, err := newAuthorizer(Config{AuthorizationMode: AuthorizationModeWebhook, Client: kubetest.Wrap(client), NodeName: "node-1",
		AuthorizedCacheTTL: time.Minute, UnauthorizedCacheTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{"alice-token": "alice", "bob-token": "bob"}
	authn := &authenticator{tokens: newTokenCache(tokenCacheConfig{reviewer: tokenClient(nil, tokens).AuthenticationV1().TokenReviews(), successTTL: time.Minute, failureTTL: time.Minute}), now: time.Now}
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) })
	h := withCanonicalPath(withAuth(authn, authz, next))

	tests := []struct {
		name, method, path, token string
		code                      int
		body                      string
	}{
		{name: "no credentials", method: "GET", path: "/pods", code: http.StatusUnauthorized},
		{name: "bad token", method: "GET", path: "/pods", token: "nope", code: http.StatusUnauthorized},
		{name: "fine-grained pods", method: "GET", path: "/pods", token: "alice-token", code: http.StatusOK},
		{name: "logs need proxy", method: "GET", path: "/containerLogs/ns/p/c", token: "alice-token", code: http.StatusForbidden,
			body: "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[proxy])"},
		{name: "exec over GET needs create", method: "GET", path: "/exec/ns/p/c", token: "alice-token", code: http.StatusForbidden,
			body: "verb=create"},
		{name: "pods through proxy fallback", method: "GET", path: "/pods", token: "bob-token", code: http.StatusOK},
		{name: "exec with proxy", method: "GET", path: "/exec/ns/p/c", token: "bob-token", code: http.StatusOK},
		{name: "traversal refused before auth", method: "GET", path: "/containerLogs/ns/p/../../etc", code: http.StatusBadRequest},
		{name: "unknown method", method: "OPTIONS", path: "/pods", token: "bob-token", code: http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "https://node"+"/", nil)
			req.URL.Path = tt.path
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.body) {
				t.Errorf("%s %s = %d %q, want %d containing %q", tt.method, tt.path, rec.Code, rec.Body.String(), tt.code, tt.body)
			}
		})
	}
}
