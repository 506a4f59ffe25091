package volume

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func TestTokenRefresh(t *testing.T) {
	tests := []struct {
		name        string
		expiration  *int64
		advance     time.Duration
		wantTokens  int
		wantExpSecs int64
	}{
		{name: "fresh token reused", advance: 47 * time.Minute, wantTokens: 1, wantExpSecs: 3600},
		{name: "refreshed after 80% of an hour", advance: 48 * time.Minute, wantTokens: 2, wantExpSecs: 3600},
		{name: "short token refreshed at 8 minutes", expiration: ptr(int64(600)), advance: 8 * time.Minute, wantTokens: 2, wantExpSecs: 600},
		{name: "short token reused at 7 minutes", expiration: ptr(int64(600)), advance: 7 * time.Minute, wantTokens: 1, wantExpSecs: 600},
		{name: "long token refreshed after 24h", expiration: ptr(int64(7 * 24 * 3600)), advance: 24 * time.Hour, wantTokens: 2, wantExpSecs: 7 * 24 * 3600},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			pod := basePod()
			proj := &v1.ServiceAccountTokenProjection{Path: "token", Audience: "vault", ExpirationSeconds: tc.expiration}
			ctx := context.Background()
			first, err := f.mgr.tokens.token(ctx, pod, proj)
			if err != nil {
				t.Fatal(err)
			}
			f.clock.Step(tc.advance)
			second, err := f.mgr.tokens.token(ctx, pod, proj)
			if err != nil {
				t.Fatal(err)
			}
			if n := f.tokens.count(); n != tc.wantTokens {
				t.Errorf("token requests = %d, want %d", n, tc.wantTokens)
			}
			if (first != second) != (tc.wantTokens == 2) {
				t.Errorf("tokens %q then %q", first, second)
			}
			req := f.tokens.requests[0]
			if *req.Spec.ExpirationSeconds != tc.wantExpSecs {
				t.Errorf("expirationSeconds = %d, want %d", *req.Spec.ExpirationSeconds, tc.wantExpSecs)
			}
			ref := req.Spec.BoundObjectRef
			if ref == nil || ref.Kind != "Pod" || ref.Name != "web" || ref.UID != pod.UID || ref.APIVersion != "v1" {
				t.Errorf("bound object ref = %+v", ref)
			}
			if len(req.Spec.Audiences) != 1 || req.Spec.Audiences[0] != "vault" {
				t.Errorf("audiences = %v", req.Spec.Audiences)
			}
		})
	}
}

func TestTokenErrors(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.mgr.tokens.token(ctx, basePod(), &v1.ServiceAccountTokenProjection{Path: "t", ExpirationSeconds: ptr(int64(60))}); err == nil {
		t.Error("expirationSeconds below 10 minutes accepted")
	}
	proj := &v1.ServiceAccountTokenProjection{Path: "t"}
	tok, err := f.mgr.tokens.token(ctx, basePod(), proj)
	if err != nil {
		t.Fatal(err)
	}
	// Due for refresh but the apiserver fails: the still-valid token stays.
	f.clock.Step(50 * time.Minute)
	f.tokens.fail = errors.New("apiserver down")
	got, err := f.mgr.tokens.token(ctx, basePod(), proj)
	if err != nil || got != tok {
		t.Errorf("during outage: %q, %v; want old token", got, err)
	}
	// Expired and failing: an error.
	f.clock.Step(time.Hour)
	if _, err := f.mgr.tokens.token(ctx, basePod(), proj); err == nil {
		t.Error("expired token returned during outage")
	}
	if next, ok := f.mgr.NextRefresh(basePod().UID); !ok || next.IsZero() {
		t.Errorf("NextRefresh = %v %v", next, ok)
	}
}

// The Node authorizer refuses a pod's token until its own watch has the
// pod bound here: a pod's first token is asked again for a moment; a
// refusal of another kind, or of a later token, is not.
func TestTokenForbiddenWhileAuthorizerCatchesUp(t *testing.T) {
	saved := forbiddenRetries
	forbiddenRetries = []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}
	t.Cleanup(func() { forbiddenRetries = saved })
	forbidden := apierrors.NewForbidden(v1.Resource("serviceaccounts"), "default",
		errors.New("node requested token bound to a pod scheduled on a different node"))
	proj := &v1.ServiceAccountTokenProjection{Path: "t"}
	ctx := context.Background()

	f := newFixture(t)
	f.tokens.failNext = []error{forbidden, forbidden}
	if _, err := f.mgr.tokens.token(ctx, basePod(), proj); err != nil {
		t.Fatalf("first token after two refusals: %v", err)
	}
	if f.tokens.attempts != 3 {
		t.Errorf("%d requests, want 3", f.tokens.attempts)
	}

	f = newFixture(t)
	f.tokens.fail = forbidden
	if _, err := f.mgr.tokens.token(ctx, basePod(), proj); !apierrors.IsForbidden(err) {
		t.Errorf("refused for good: %v, want Forbidden", err)
	}
	if f.tokens.attempts != 4 {
		t.Errorf("%d requests refused for good, want 4 (one and three retries)", f.tokens.attempts)
	}

	f = newFixture(t)
	f.tokens.failNext = []error{errors.New("apiserver down")}
	if _, err := f.mgr.tokens.token(ctx, basePod(), proj); err == nil || f.tokens.attempts != 1 {
		t.Errorf("another error: %v after %d requests, want it at once", err, f.tokens.attempts)
	}
}
