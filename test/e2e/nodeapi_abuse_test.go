//go:build e2e

package e2e

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// The node API's own defaults (pkg/server) that these tests reach; the harness sets none
// of them.
const (
	nodeAPIMaxStreamsPerUser    = 128
	nodeAPIMaxLogFollowsPerUser = 256
	nodeAPITokenReviewBurst     = 100
	nodeAPITokenReviewQPS       = 20
)

// dialNodeAPI opens a TLS connection to the node's API speaking HTTP/1.1, closed with the
// test.
func dialNodeAPI(t *testing.T) *tls.Conn {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", harness.NodeIP+":10250",
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rawNodeRequest writes one request on conn and reads the response's status and headers;
// the body is left to read.
func rawNodeRequest(t *testing.T, conn net.Conn, br *bufio.Reader, method, target, token string, header string) *http.Response {
	t.Helper()
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, harness.NodeIP)
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(conn, req+header+"\r\n"); err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return resp
}

// closedWithin waits up to d for the server to close conn, and says after how long.
func closedWithin(conn net.Conn, d time.Duration) (bool, time.Duration) {
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, time.Since(start)
	}
	return true, time.Since(start)
}

// TestHealthzPortServesOnlyHealthz: the plain-HTTP healthz port answers /healthz and
// nothing of the node API.
func TestHealthzPortServesOnlyHealthz(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, "http://127.0.0.1:10248"+path, nil)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("%s %s on the healthz port: %v", method, path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("GET", "/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("GET /healthz on the healthz port = %d %q, want 200 ok", code, body)
	}
	for _, p := range []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/pods"}, {"GET", "/runningpods/"}, {"GET", "/metrics"}, {"GET", "/metrics/cadvisor"},
		{"GET", "/stats/summary"}, {"GET", "/configz"}, {"GET", "/debug/pprof/"}, {"GET", "/logs/"},
		{"GET", "/containerLogs/default/any/main"}, {"POST", "/exec/default/any/main?command=id"},
		{"POST", "/checkpoint/default/any/main"}, {"GET", "/healthz/syncloop"},
	} {
		if code, body := get(p.method, p.path); code != http.StatusNotFound {
			t.Errorf("%s %s on the healthz port = %d %.100q, want 404", p.method, p.path, code, body)
		}
	}
}

// TestNoReadOnlyPort: nothing listens on the kubelet's read-only port, on the node's IP or
// on loopback.
func TestNoReadOnlyPort(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	for _, host := range []string{harness.NodeIP, "127.0.0.1"} {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, "10255"), 5*time.Second)
		if err == nil {
			conn.Close()
			t.Errorf("something listens on %s:10255", host)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial %s:10255: %v, want connection refused", host, err)
		}
	}
}

// TestCheckpointNotServed: /checkpoint (the kubelet's ContainerCheckpoint endpoint) is not
// served on :10250, even to an identity allowed to use it.
func TestCheckpointNotServed(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	token, _ := serviceAccountToken(t, "nodeapi-checkpoint",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/checkpoint", "nodes/proxy"}, Verbs: []string{"get", "create"}})
	target := fmt.Sprintf("/checkpoint/%s/any/main", podNS)
	framework.Eventually(t, time.Minute, func() error {
		if code, body := nodeDo(t, http.MethodPost, target, token, nil); code != http.StatusNotFound {
			return fmt.Errorf("POST %s with nodes/checkpoint: %d %.200q, want 404", target, code, body)
		}
		return nil
	})
}

// TestNodeAPIIdleConnectionsClosed: a connection that sends no request is closed after
// the read-header timeout (30 s), and a kept-alive one after the kubelet's 90 s idle
// timeout.
func TestNodeAPIIdleConnectionsClosed(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	t.Run("no request", func(t *testing.T) {
		t.Parallel()
		if closed, after := closedWithin(dialNodeAPI(t), 60*time.Second); !closed || after < 20*time.Second {
			t.Errorf("a connection without a request: closed %v after %s, want closed after about 30s", closed, after)
		}
	})
	t.Run("kept alive", func(t *testing.T) {
		t.Parallel()
		conn := dialNodeAPI(t)
		br := bufio.NewReader(conn)
		// Refused, but answered on a connection that stays open.
		resp := rawNodeRequest(t, conn, br, "GET", "/pods", "", "")
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusUnauthorized || resp.Close {
			t.Fatalf("anonymous GET /pods = %d (close %v), want 401 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		if closed, after := closedWithin(conn, 150*time.Second); !closed || after < 80*time.Second {
			t.Errorf("an idle kept-alive connection: closed %v after %s, want closed after about 90s", closed, after)
		}
	})
}

// TestNodeAPIFailedUpgradeClosesConnection: an exec upgrade refused, whether for its
// credentials or its target, is answered and its connection closed; a refused plain
// request leaves its connection open.
func TestNodeAPIFailedUpgradeClosesConnection(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	token, _ := serviceAccountToken(t, "nodeapi-upgrade", nodesProxy("get", "create"))
	exec := fmt.Sprintf("/exec/%s/no-such-pod/main?command=id&output=1", podNS)
	upgrade := "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
	// Once the binding has reached the apiserver's authorizer, a plain POST is let in and
	// refused for not being an upgrade.
	framework.Eventually(t, time.Minute, func() error {
		if code, body := nodeDo(t, http.MethodPost, exec, token, nil); code != http.StatusBadRequest {
			return fmt.Errorf("plain POST %s: %d %.200q, want 400", exec, code, body)
		}
		return nil
	})
	tests := []struct {
		name, token, header string
		code                int
		closed              bool
	}{
		{name: "unauthenticated upgrade", header: upgrade, code: http.StatusUnauthorized, closed: true},
		{name: "upgrade to a missing pod", token: token, header: upgrade, code: http.StatusNotFound, closed: true},
		{name: "plain request to a missing pod", token: token, code: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dialNodeAPI(t)
			br := bufio.NewReader(conn)
			resp := rawNodeRequest(t, conn, br, "POST", exec, tt.token, tt.header)
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != tt.code {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.code)
			}
			// A second request is answered only on a connection still open.
			_, _ = fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", harness.NodeIP)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := http.ReadResponse(br, nil)
			if closed := err != nil; closed != tt.closed {
				t.Errorf("connection closed %v (%v), want %v", closed, err, tt.closed)
			}
		})
	}
}

// TestNodeAPIPerUserCaps: one identity's port-forward streams and followed logs are capped
// (nodeagent's MaxStreamsPerUser and MaxLogFollowsPerUser); the next one is answered 429
// saying which cap, and a closed one gives its place back.
func TestNodeAPIPerUserCaps(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := waitPod(t, createPod(t, busyboxPod("caps", corev1.RestartPolicyAlways, "echo hello; "+sleeperScript)), 2*time.Minute, runningAndReady)
	token, _ := serviceAccountToken(t, "nodeapi-caps", nodesProxy("get", "create"))
	logs := fmt.Sprintf("/containerLogs/%s/%s/main", podNS, pod.Name)
	framework.Eventually(t, time.Minute, func() error {
		if code, body := nodeGet(t, logs, token); code != http.StatusOK || body != "hello\n" {
			return fmt.Errorf("GET %s: %d %q", logs, code, body)
		}
		return nil
	})

	// hold opens n requests that stay open, each answered want, and returns their
	// connections.
	hold := func(t *testing.T, n int, method, target, header string, want int) []net.Conn {
		conns := make([]net.Conn, 0, n)
		for i := 0; i < n; i++ {
			conn := dialNodeAPI(t)
			resp := rawNodeRequest(t, conn, bufio.NewReader(conn), method, target, token, header)
			if resp.StatusCode != want {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
				t.Fatalf("request %d of %d to %s = %d %q, want %d", i+1, n, target, resp.StatusCode, body, want)
			}
			conns = append(conns, conn)
		}
		return conns
	}
	over := func(t *testing.T, method, target, header, limit string) {
		conn := dialNodeAPI(t)
		resp := rawNodeRequest(t, conn, bufio.NewReader(conn), method, target, token, header)
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), limit) {
			t.Errorf("one more %s = %d %q, want 429 naming %q", target, resp.StatusCode, body, limit)
		}
	}

	t.Run("streams", func(t *testing.T) {
		// Port-forward streams cost the container nothing until a port is used.
		pf := fmt.Sprintf("/portForward/%s/%s", podNS, pod.Name)
		spdy := "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n"
		conns := hold(t, nodeAPIMaxStreamsPerUser, "POST", pf, spdy, http.StatusSwitchingProtocols)
		over(t, "POST", pf, spdy, "MaxStreamsPerUser")
		conns[0].Close()
		framework.Eventually(t, 30*time.Second, func() error {
			conn := dialNodeAPI(t)
			defer conn.Close()
			if resp := rawNodeRequest(t, conn, bufio.NewReader(conn), "POST", pf, token, spdy); resp.StatusCode != http.StatusSwitchingProtocols {
				return fmt.Errorf("a stream after closing one = %d, want 101", resp.StatusCode)
			}
			return nil
		})
		for _, c := range conns {
			c.Close()
		}
	})

	t.Run("log follows", func(t *testing.T) {
		conns := hold(t, nodeAPIMaxLogFollowsPerUser, "GET", logs+"?follow=true", "", http.StatusOK)
		over(t, "GET", logs+"?follow=true", "", "MaxLogFollowsPerUser")
		if code, body := nodeGet(t, logs, token); code != http.StatusOK || body != "hello\n" {
			t.Errorf("a plain log read beside the follows = %d %q, want 200 hello", code, body)
		}
		for _, c := range conns {
			c.Close()
		}
	})
}

// reviewCounts reads nodeagent_token_reviews_total (all results) and
// nodeagent_token_reviews_throttled_total from the agent's /metrics, through the
// apiserver, whose client certificate needs no review.
func reviewCounts(t *testing.T) (reviews, throttled float64) {
	t.Helper()
	m, err := samples(framework.Kubectl(t, nodeProxy("/metrics")...))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	for _, s := range m["nodeagent_token_reviews_total"] {
		reviews += float64(s.Value)
	}
	for _, s := range m["nodeagent_token_reviews_throttled_total"] {
		throttled += float64(s.Value)
	}
	return reviews, throttled
}

// TestBadTokenFloodIsBounded: a flood of distinct made-up bearer tokens sends no more
// TokenReviews than the rate limit lets through (the rest are answered 429), and one bad
// token sent again and again is reviewed once (refusals are cached). Not parallel: the
// flood takes the node's review budget, which other tests' first requests need.
func TestBadTokenFloodIsBounded(t *testing.T) {
	requireNodeagent(t)
	// Give back the budget before the next test.
	t.Cleanup(func() { time.Sleep(6 * time.Second) })
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: 32,
	}}
	get := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, nodeAPIURL+"/pods", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("GET /pods: %v", err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}

	t.Run("distinct tokens", func(t *testing.T) {
		reviewsBefore, throttledBefore := reviewCounts(t)
		const flood, workers = 400, 32
		prefix := fmt.Sprintf("made-up-%d-", time.Now().UnixNano())
		codes := make(chan int, flood)
		next := make(chan int, flood)
		for i := 0; i < flood; i++ {
			next <- i
		}
		close(next)
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Go(func() {
				for i := range next {
					codes <- get(fmt.Sprint(prefix, i))
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(codes)
		count := map[int]int{}
		for c := range codes {
			count[c]++
		}
		if count[http.StatusUnauthorized]+count[http.StatusTooManyRequests] != flood {
			t.Errorf("answers to %d made-up tokens: %v, want only 401 and 429", flood, count)
		}
		reviewsAfter, throttledAfter := reviewCounts(t)
		bound := float64(nodeAPITokenReviewBurst) + nodeAPITokenReviewQPS*elapsed.Seconds() + 5
		if sent := reviewsAfter - reviewsBefore; sent > bound {
			t.Errorf("%d made-up tokens in %s sent %v TokenReviews, want at most %.0f", flood, elapsed, sent, bound)
		}
		if count[http.StatusTooManyRequests] > 0 && throttledAfter-throttledBefore < float64(count[http.StatusTooManyRequests]) {
			t.Errorf("%d answers 429 but nodeagent_token_reviews_throttled_total rose by %v", count[http.StatusTooManyRequests], throttledAfter-throttledBefore)
		}
		t.Logf("%d made-up tokens in %s: answers %v, %v TokenReviews", flood, elapsed, count, reviewsAfter-reviewsBefore)
	})

	t.Run("one token again and again", func(t *testing.T) {
		time.Sleep(3 * time.Second) // the bucket refills
		token := fmt.Sprintf("made-up-again-%d", time.Now().UnixNano())
		before, _ := reviewCounts(t)
		for i := 0; i < 50; i++ {
			if code := get(token); code != http.StatusUnauthorized {
				t.Fatalf("request %d with one bad token = %d, want 401", i+1, code)
			}
		}
		if after, _ := reviewCounts(t); after-before != 1 {
			t.Errorf("50 requests with one bad token sent %v TokenReviews, want 1", after-before)
		}
	})
}
