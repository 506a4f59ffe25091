package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// runServer starts s and stops it with the test.
func runServer(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// closedWithin reports whether the server closes conn within d, and
// after how long.
func closedWithin(t *testing.T, conn net.Conn, d time.Duration) (bool, time.Duration) {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, time.Since(start)
	}
	return true, time.Since(start)
}

// TestIdleConnectionsClosed: a connection that says nothing, before or
// after its TLS handshake, is closed after the read-header timeout, and a
// kept-alive one after the idle timeout (the kubelet's 90 s).
func TestIdleConnectionsClosed(t *testing.T) {
	if idleTimeout != 90*time.Second {
		t.Errorf("idle timeout %s, want the kubelet's 90s", idleTimeout)
	}
	cfg := baseConfig(t)
	cfg.AnonymousEnabled = true
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.idleTimeout, s.readHeaderTimeout = 300*time.Millisecond, 200*time.Millisecond
	runServer(t, s)
	dialTLS := func() *tls.Conn {
		conn, err := tls.Dial("tcp", s.Addr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	t.Run("no handshake", func(t *testing.T) {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if closed, after := closedWithin(t, conn, 5*time.Second); !closed {
			t.Errorf("a connection without a handshake was still open after %s", after)
		}
	})
	t.Run("no request", func(t *testing.T) {
		if closed, after := closedWithin(t, dialTLS(), 5*time.Second); !closed || after < s.readHeaderTimeout/2 {
			t.Errorf("a connection without a request: closed %v after %s, want closed after about %s", closed, after, s.readHeaderTimeout)
		}
	})
	t.Run("kept alive", func(t *testing.T) {
		conn := dialTLS()
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "ok" || resp.Close {
			t.Fatalf("GET /healthz = %d %q (close %v)", resp.StatusCode, body, resp.Close)
		}
		if closed, after := closedWithin(t, conn, 5*time.Second); !closed || after < s.idleTimeout/2 {
			t.Errorf("an idle kept-alive connection: closed %v after %s, want closed after about %s", closed, after, s.idleTimeout)
		}
	})
}

// TestFailedUpgradeClosesConnection: an exec, attach or port-forward
// upgrade answered with anything but 101 closes its connection, whatever
// refused it; a plain request's error leaves the connection open.
func TestFailedUpgradeClosesConnection(t *testing.T) {
	cfg := baseConfig(t)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.listener.Close() })
	anon := cfg
	anon.CertDir = t.TempDir()
	anon.AnonymousEnabled = true
	anon.EnableDebuggingHandlers = true
	sa, err := New(anon)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sa.listener.Close() })

	upgrade := "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
	tests := []struct {
		name    string
		handler http.Handler
		request string
		code    int
		closed  bool
	}{
		{name: "unauthenticated upgrade", handler: s.Handler(), request: "POST /exec/default/web/app?command=ls&output=1 HTTP/1.1\r\nHost: node\r\n" + upgrade, code: 401, closed: true},
		{name: "upgrade to an unknown pod", handler: sa.Handler(), request: "POST /exec/default/nope/app?command=ls&output=1 HTTP/1.1\r\nHost: node\r\n" + upgrade, code: 404, closed: true},
		{name: "bad upgrade request", handler: sa.Handler(), request: "POST /exec/default/web/app?output=1 HTTP/1.1\r\nHost: node\r\n" + upgrade, code: 400, closed: true},
		{name: "upgrade of a bad path", handler: sa.Handler(), request: "GET /exec/../pods HTTP/1.1\r\nHost: node\r\n" + upgrade, code: 400, closed: true},
		{name: "plain request error", handler: sa.Handler(), request: "GET /containerLogs/default/nope/app HTTP/1.1\r\nHost: node\r\n", code: 404},
		{name: "plain unauthenticated request", handler: s.Handler(), request: "GET /pods HTTP/1.1\r\nHost: node\r\n", code: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tt.request+"\r\n"); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != tt.code {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.code)
			}
			// Whether the server hangs up: another request either gets an
			// answer or finds the connection closed.
			_, _ = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n")
			_, err = http.ReadResponse(br, nil)
			if closed := err != nil; closed != tt.closed {
				t.Errorf("connection closed %v (%v), want %v", closed, err, tt.closed)
			}
		})
	}
}

// TestUnservedPaths: the node API has no /checkpoint (the kubelet's
// ContainerCheckpoint endpoint) and no other path than its own; the
// healthz port serves /healthz and nothing else.
func TestUnservedPaths(t *testing.T) {
	cfg := baseConfig(t)
	cfg.AnonymousEnabled = true
	cfg.EnableDebuggingHandlers = true
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.listener.Close() })
	tests := []struct {
		name, method, target string
		handler              http.Handler
		code                 int
	}{
		{name: "node API checkpoint", method: "POST", target: "/checkpoint/default/web/app", handler: s.Handler(), code: 404},
		{name: "node API checkpoint with uid", method: "POST", target: "/checkpoint/default/web/uid-1/app", handler: s.Handler(), code: 404},
		{name: "node API pods", method: "GET", target: "/pods", handler: s.Handler(), code: 200},
		{name: "healthz", method: "GET", target: "/healthz", handler: Handler(), code: 200},
		{name: "healthz ping", method: "GET", target: "/healthz/ping", handler: Handler(), code: 200},
		{name: "healthz root", method: "GET", target: "/", handler: Handler(), code: 404},
		{name: "healthz pods", method: "GET", target: "/pods", handler: Handler(), code: 404},
		{name: "healthz metrics", method: "GET", target: "/metrics", handler: Handler(), code: 404},
		{name: "healthz configz", method: "GET", target: "/configz", handler: Handler(), code: 404},
		{name: "healthz stats", method: "GET", target: "/stats/summary", handler: Handler(), code: 404},
		{name: "healthz logs", method: "GET", target: "/containerLogs/default/web/app", handler: Handler(), code: 404},
		{name: "healthz exec", method: "POST", target: "/exec/default/web/app?command=ls", handler: Handler(), code: 404},
		{name: "healthz checkpoint", method: "POST", target: "/checkpoint/default/web/app", handler: Handler(), code: 404},
		{name: "healthz pprof", method: "GET", target: "/debug/pprof/", handler: Handler(), code: 404},
		{name: "healthz below healthz", method: "GET", target: "/healthz/syncloop", handler: Handler(), code: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tt.handler.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.target, nil))
			if rec.Code != tt.code {
				t.Errorf("%s %s = %d %q, want %d", tt.method, tt.target, rec.Code, rec.Body.String(), tt.code)
			}
		})
	}
}
