package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestConcurrencyLimit(t *testing.T) {
	tests := []struct {
		name  string
		max   int
		steps []string // "+user" acquires (ok), "!user" acquires (refused), "-user" releases the oldest
	}{
		{name: "up to the cap", max: 2, steps: []string{"+alice", "+alice", "!alice"}},
		{name: "per user", max: 1, steps: []string{"+alice", "+bob", "!alice", "!bob"}},
		{name: "release frees a place", max: 1, steps: []string{"+alice", "!alice", "-alice", "+alice"}},
		{name: "no cap", max: -1, steps: []string{"+alice", "+alice", "+alice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newConcurrencyLimit(tt.max, limitStreams, nil)
			held := map[string][]func(){}
			for i, s := range tt.steps {
				user := s[1:]
				switch s[0] {
				case '+', '!':
					release, err := l.acquire(user)
					if (err == nil) != (s[0] == '+') {
						t.Fatalf("step %d %s: err = %v", i, s, err)
					}
					if err != nil {
						var he *httpError
						if !errors.As(err, &he) || he.code != http.StatusTooManyRequests || !strings.Contains(err.Error(), "MaxStreamsPerUser") || !strings.Contains(err.Error(), user) {
							t.Fatalf("step %d %s: err = %v, want a 429 naming the cap and the user", i, s, err)
						}
						continue
					}
					held[user] = append(held[user], release)
				case '-':
					held[user][0]()
					held[user][0]() // a second release gives back nothing more
					held[user] = held[user][1:]
				}
			}
		})
	}
}

// asUser stands in for authentication: the user is the X-Test-User header.
func asUser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(withUser(r.Context(), &userInfo{Name: r.Header.Get("X-Test-User")})))
	})
}

// rawRequest sends one request on a new connection and returns the
// response with the connection, left open.
func rawRequest(t *testing.T, addr, method, target, user string, upgrade bool) (*http.Response, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: node\r\nX-Test-User: %s\r\n", method, target, user)
	if upgrade {
		req += "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
	}
	if _, err := conn.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return resp, conn
}

// TestStreamsCappedPerUser: past MaxStreamsPerUser a user's next exec,
// attach or port-forward is answered 429 naming the cap; other users are
// not affected, and a closed stream gives its place back.
func TestStreamsCappedPerUser(t *testing.T) {
	rt, _, _ := streamFixture(t, 0)
	a := testAPI(rt, testPod())
	a.streams = newConcurrencyLimit(2, limitStreams, nil)
	srv := httptest.NewServer(asUser(a.routes()))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	exec := "/exec/default/web/app?command=sh&output=1"

	var open []net.Conn
	for _, target := range []string{exec, "/portForward/default/web"} {
		resp, conn := rawRequest(t, addr, "POST", target, "alice", true)
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("stream %s: %d", target, resp.StatusCode)
		}
		open = append(open, conn)
	}
	resp, _ := rawRequest(t, addr, "POST", "/attach/default/web/app?output=1", "alice", true)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "exec, attach and port-forward streams") {
		t.Errorf("third stream of alice = %d %q, want 429 naming the streams cap", resp.StatusCode, body)
	}
	if resp, _ := rawRequest(t, addr, "POST", exec, "bob", true); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("bob's stream beside alice's = %d, want 101", resp.StatusCode)
	}
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := rawRequest(t, addr, "POST", exec, "alice", true)
		if resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's stream after closing one = %d, want 101", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLogFollowsCappedPerUser: past MaxLogFollowsPerUser a user's next
// follow is answered 429; logs that are not followed are not capped.
func TestLogFollowsCappedPerUser(t *testing.T) {
	rt, _ := logsFixture(t)
	a := testAPI(rt, testPod())
	a.follows = newConcurrencyLimit(1, limitLogFollows, nil)
	srv := httptest.NewServer(asUser(a.routes()))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	follow := "/containerLogs/default/web/app?follow=true"

	if resp, _ := rawRequest(t, addr, "GET", follow, "alice", false); resp.StatusCode != http.StatusOK {
		t.Fatalf("first follow = %d", resp.StatusCode)
	}
	resp, _ := rawRequest(t, addr, "GET", follow, "alice", false)
	body := make([]byte, 200)
	n, _ := io.ReadAtLeast(resp.Body, body, 1)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body[:n]), "followed container logs") {
		t.Errorf("second follow of alice = %d %q, want 429 naming the follows cap", resp.StatusCode, body[:n])
	}
	if resp, _ := rawRequest(t, addr, "GET", "/containerLogs/default/web/app", "alice", false); resp.StatusCode != http.StatusOK {
		t.Errorf("a plain log read beside the follow = %d, want 200", resp.StatusCode)
	}
	if resp, _ := rawRequest(t, addr, "GET", follow, "bob", false); resp.StatusCode != http.StatusOK {
		t.Errorf("bob's follow = %d, want 200", resp.StatusCode)
	}
}
