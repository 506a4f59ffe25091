package server

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stalledClient sends a request on a connection with a small receive buffer
// and never reads the answer.
func stalledClient(t *testing.T, addr, target string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1024) }); cerr != nil {
			return cerr
		}
		return err
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: node\r\n\r\n", target); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestStalledLogClient: a client that stops reading a followed log holds up
// no other request, and is cut after the streaming idle timeout.
func TestStalledLogClient(t *testing.T) {
	rt, _ := logsFixture(t)
	// Far more log than the socket buffers between client and server hold.
	var big bytes.Buffer
	line := strings.Repeat("x", 1000)
	for big.Len() < 16<<20 {
		big.WriteString(logLine(2, "stdout", "F", line))
	}
	must(t, mkdirWrite(rt.logPaths["app-1"], big.String()))
	a := testAPI(rt, testPod())
	a.idleTimeout = 300 * time.Millisecond
	routes := a.routes()
	finished := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		routes.ServeHTTP(w, r)
		finished <- r.URL.RawQuery
	}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	start := time.Now()
	stalled := stalledClient(t, addr, "/containerLogs/default/web/app?follow=true")
	// Everything else is answered while it stalls.
	for i := 0; i < 3; i++ {
		resp, err := http.Get(srv.URL + "/containerLogs/default/web/app?tailLines=1&limitBytes=5")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "xxxxx" {
			t.Fatalf("a request beside a stalled follow = %d %q", resp.StatusCode, body)
		}
		if q := <-finished; !strings.Contains(q, "tailLines") {
			t.Fatalf("the stalled follow ended (%s) before its client read anything", q)
		}
	}
	select {
	case q := <-finished:
		if d := time.Since(start); d < a.idleTimeout {
			t.Errorf("follow %s ended after %s, before the idle timeout", q, d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a follow whose client never reads was not cut")
	}
	// What the client gets is cut short: the follow did not run to the end.
	_ = stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, stalled)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the stalled connection is still open after %d bytes", n)
	}
	if n >= int64(big.Len()) {
		t.Errorf("read %d bytes of a %d byte log from a cut stream", n, big.Len())
	}
}

// TestIdleFollowIsNotCut: a followed log with nothing new is not idle in the
// sense of the timeout: its client is waiting, not stuck.
func TestIdleFollowIsNotCut(t *testing.T) {
	rt, _ := logsFixture(t)
	api := testAPI(rt, testPod())
	api.idleTimeout = 100 * time.Millisecond
	srv := httptest.NewServer(api.routes())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/containerLogs/default/web/app?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make([]byte, len("second run\noops\n"))
	if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != "second run\noops\n" {
		t.Fatalf("follow = %q %v", got, err)
	}
	// Five idle timeouts without a line: the time passing is what is tested.
	time.Sleep(5 * api.idleTimeout)
	f, err := os.OpenFile(rt.logPaths["app-1"], os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString(logLine(4, "stdout", "F", "later"))
	must(t, err)
	must(t, f.Close())
	next := make([]byte, len("later\n"))
	if _, err := io.ReadFull(resp.Body, next); err != nil || string(next) != "later\n" {
		t.Fatalf("after an idle while, follow = %q %v", next, err)
	}
}
