package volume

import (
	"context"
	"errors"
	"slices"
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

// firstPodRefused sets the retries' waits, has the apiserver refuse the next
// refusals token requests as the Node authorizer does while its graph lags,
// and asks the first pod's token in the background; its answer comes on the
// channel.
func firstPodRefused(t *testing.T, retries []time.Duration, refusals int) (*fixture, *v1.ServiceAccountTokenProjection, <-chan error) {
	t.Helper()
	saved := forbiddenRetries
	forbiddenRetries = retries
	t.Cleanup(func() { forbiddenRetries = saved })
	f := newFixture(t)
	for range refusals {
		f.tokens.failNext = append(f.tokens.failNext, apierrors.NewForbidden(v1.Resource("serviceaccounts"), "default",
			errors.New("no relationship found between node 'node-a' and this object")))
	}
	proj := &v1.ServiceAccountTokenProjection{Path: "t"}
	first := make(chan error, 1)
	go func() {
		_, err := f.mgr.tokens.token(context.Background(), basePod(), proj)
		first <- err
	}()
	return f, proj, first
}

// While 100 pods are bound at once the Node authorizer's graph lags them
// all: after one pod's first token is refused, another pod's first request
// waits out the same retry instead of being refused in turn.
func TestTokenRefusalHoldsOtherPodsBack(t *testing.T) {
	f, proj, first := firstPodRefused(t, []time.Duration{200 * time.Millisecond, time.Millisecond}, 1)
	ctx := context.Background()
	attempts := func() int {
		f.tokens.mu.Lock()
		defer f.tokens.mu.Unlock()
		return f.tokens.attempts
	}
	for deadline := time.Now().Add(5 * time.Second); attempts() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first pod's request was never sent")
		}
	}
	// The refusal is noted just after the reactor answers it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		f.mgr.tokens.lag.mu.Lock()
		noted := !f.mgr.tokens.lag.until.IsZero()
		f.mgr.tokens.lag.mu.Unlock()
		if noted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the refusal never moved the gate")
		}
	}
	start := time.Now()
	other := basePod(func(p *v1.Pod) { p.Name, p.UID = "other", "uid-2" })
	if _, err := f.mgr.tokens.token(ctx, other, proj); err != nil {
		t.Fatalf("second pod: %v", err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("second pod's request sent after %v, want it held until the first retry", waited)
	}
	if err := <-first; err != nil {
		t.Fatalf("first pod after one refusal: %v", err)
	}
	if n := attempts(); n != 3 {
		t.Errorf("%d requests, want 3: the refused one, its retry, the other pod's", n)
	}
}

// While the authorizer's graph lags by more than a retry, the gate stays
// closed until the refused pod's retry is answered: the other pod's first
// request is not refused in turn.
func TestTokenGateOpensWhenTheRefusedPodIsAnswered(t *testing.T) {
	// The first three requests, whoever sends them, are refused.
	step := 100 * time.Millisecond
	f, proj, first := firstPodRefused(t, []time.Duration{step, step, step, step}, 3)
	ctx := context.Background()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		f.mgr.tokens.lag.mu.Lock()
		held := f.mgr.tokens.lag.held > 0
		f.mgr.tokens.lag.mu.Unlock()
		if held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the refusal never closed the gate")
		}
	}
	other := basePod(func(p *v1.Pod) { p.Name, p.UID = "other", "uid-2" })
	if _, err := f.mgr.tokens.token(ctx, other, proj); err != nil {
		t.Fatalf("second pod: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first pod after three refusals: %v", err)
	}
	f.tokens.mu.Lock()
	defer f.tokens.mu.Unlock()
	if f.tokens.attempts != 5 || slices.Contains(f.tokens.refusedPods, "uid-2") {
		t.Errorf("%d requests, refused: %v; want 5, the first pod's four and the other pod's one, never refused", f.tokens.attempts, f.tokens.refusedPods)
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
