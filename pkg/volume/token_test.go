package volume

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
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
