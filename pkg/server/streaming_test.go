package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// echoStreamServer plays the runtime's streaming server: it switches
// protocols and echoes what it reads. It records what it was asked.
type echoStreamServer struct {
	mu       sync.Mutex
	requests []*http.Request
	redirect bool
}

func (s *echoStreamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r.Clone(r.Context()))
	s.mu.Unlock()
	if s.redirect {
		http.Redirect(w, r, "http://example.com/", http.StatusFound)
		return
	}
	if r.Header.Get("Upgrade") == "" {
		http.Error(w, "upgrade required", http.StatusBadRequest)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\n\r\n")
	_ = brw.Flush()
	_, _ = io.Copy(conn, brw)
}

func (s *echoStreamServer) last() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		return nil
	}
	return s.requests[len(s.requests)-1]
}

// streamFixture runs the API over HTTP with a running app container, a
// ready sandbox and the echo server as the runtime's stream URL.
func streamFixture(t *testing.T, idle time.Duration) (*fakeRuntime, *echoStreamServer, string) {
	t.Helper()
	backend := &echoStreamServer{}
	bs := httptest.NewServer(backend)
	t.Cleanup(bs.Close)
	pod := testPod()
	rt := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{testSandbox("sb-1", pod, runtimeapi.PodSandboxState_SANDBOX_READY, 1)},
		containers: []*runtimeapi.Container{
			testContainer("app-1", pod, "app", "1", runtimeapi.ContainerState_CONTAINER_RUNNING, 2),
			testContainer("side-0", pod, "sidecar", "0", runtimeapi.ContainerState_CONTAINER_EXITED, 2),
		},
		streamURL: bs.URL + "/exec/token123",
	}
	a := testAPI(rt, pod)
	a.idleTimeout = idle
	srv := httptest.NewServer(a.routes())
	t.Cleanup(srv.Close)
	return rt, backend, srv.Listener.Addr().String()
}

// upgrade sends an upgrade request on a raw connection and returns the
// response and the connection for the stream.
func upgrade(t *testing.T, addr, method, target string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := method + " " + target + " HTTP/1.1\r\nHost: node\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n" +
		"X-Stream-Protocol-Version: v4.channel.k8s.io\r\nAuthorization: Bearer secret\r\n\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, conn, br
}

func TestExecRelaysUpgradedStream(t *testing.T) {
	rt, backend, addr := streamFixture(t, 0)
	resp, conn, br := upgrade(t, addr, "GET", "/exec/default/web/app?command=sh&command=-c&command=date&input=1&output=1&tty=1&error=1")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo = %q %v", buf, err)
	}
	ex := rt.execs[0]
	if ex.ContainerId != "app-1" || !slices.Equal(ex.Cmd, []string{"sh", "-c", "date"}) || !ex.Stdin || !ex.Stdout || !ex.Tty || ex.Stderr {
		t.Errorf("CRI exec request = %+v", ex)
	}
	got := backend.last()
	if got.URL.Path != "/exec/token123" || got.Header.Get("Authorization") != "" || got.Header.Get("X-Stream-Protocol-Version") != "v4.channel.k8s.io" {
		t.Errorf("backend saw %s %v", got.URL, got.Header)
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	const idle = 100 * time.Millisecond
	for _, target := range []string{
		"/exec/default/web/app?command=sh&input=1&output=1",
		"/attach/default/web/uid-1/app?output=1",
		"/portForward/default/web?port=8080",
	} {
		t.Run(strings.SplitN(target, "/", 3)[1], func(t *testing.T) {
			_, _, addr := streamFixture(t, idle)
			// The server's idle timer starts before the client sees the upgrade: only a
			// clock started before the request is sure to have run for the whole timeout.
			start := time.Now()
			resp, conn, br := upgrade(t, addr, "POST", target)
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status %d", resp.StatusCode)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := br.ReadByte(); err == nil {
				t.Fatal("read data from an idle stream")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("idle stream was not closed")
			}
			if d := time.Since(start); d < idle || d > 2*time.Second {
				t.Errorf("closed after %s, want about %s", d, idle)
			}
		})
	}
}

// TestStreamTrafficKeepsItOpen: a stream that carries data is never idle, however long it
// lasts; it is closed once the data stops.
func TestStreamTrafficKeepsItOpen(t *testing.T) {
	const idle = 150 * time.Millisecond
	_, _, addr := streamFixture(t, idle)
	resp, conn, br := upgrade(t, addr, "POST", "/exec/default/web/app?command=cat&input=1&output=1")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	buf := make([]byte, 4)
	// Ten idle timeouts' worth of traffic, a third of the timeout apart.
	for time.Since(start) < 10*idle {
		if _, err := conn.Write([]byte("ping")); err != nil {
			t.Fatalf("write after %s: %v", time.Since(start), err)
		}
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo after %s = %q %v", time.Since(start), buf, err)
		}
		time.Sleep(idle / 3)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("read data that was never sent")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the stream was not closed once idle")
	}
}

func TestPortForward(t *testing.T) {
	rt, _, addr := streamFixture(t, 0)
	resp, _, _ := upgrade(t, addr, "GET", "/portForward/default/web?port=8080&port=9090")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	pf := rt.forwards[0]
	if pf.PodSandboxId != "sb-1" || !slices.Equal(pf.Port, []int32{8080, 9090}) {
		t.Errorf("CRI port-forward request = %+v", pf)
	}
}

func TestStreamRequestErrors(t *testing.T) {
	tests := []struct {
		name, method, target string
		upgrade              bool
		redirect             bool
		code                 int
		body                 string
	}{
		{name: "not an upgrade", method: "POST", target: "/exec/default/web/app?command=ls&output=1", code: 400, body: "needs a SPDY or WebSocket upgrade"},
		{name: "no command", method: "GET", target: "/exec/default/web/app?output=1", upgrade: true, code: 400, body: "command is required"},
		{name: "no streams", method: "GET", target: "/exec/default/web/app?command=ls", upgrade: true, code: 400, body: "at least one of input, output or error"},
		{name: "bad flag", method: "GET", target: "/exec/default/web/app?command=ls&tty=yes", upgrade: true, code: 400, body: "invalid tty"},
		{name: "exited container", method: "GET", target: "/exec/default/web/sidecar?command=ls&output=1", upgrade: true, code: 404, body: `container "sidecar" in pod default/web is not running`},
		{name: "unknown pod", method: "GET", target: "/attach/default/db/app?output=1", upgrade: true, code: 404, body: "pod default/db not found"},
		{name: "wrong uid", method: "GET", target: "/attach/default/web/uid-2/app?output=1", upgrade: true, code: 404, body: "with UID uid-2 not found"},
		{name: "bad port", method: "GET", target: "/portForward/default/web?port=70000", upgrade: true, code: 400, body: "invalid port"},
		{name: "runtime redirect refused", method: "GET", target: "/exec/default/web/app?command=ls&output=1", upgrade: true, redirect: true, code: 502, body: "redirect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, backend, addr := streamFixture(t, 0)
			backend.redirect = tt.redirect
			var resp *http.Response
			if tt.upgrade {
				resp, _, _ = upgrade(t, addr, tt.method, tt.target)
			} else {
				var err error
				resp, err = http.Post("http://"+addr+tt.target, "", nil)
				if err != nil {
					t.Fatal(err)
				}
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code || !strings.Contains(string(body), tt.body) {
				t.Errorf("%s %s = %d %q, want %d with %q", tt.method, tt.target, resp.StatusCode, body, tt.code, tt.body)
			}
		})
	}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		resp *runtimeapi.ExecSyncResponse
		code int
		body string
	}{
		{name: "success", resp: &runtimeapi.ExecSyncResponse{Stdout: []byte("out\n"), Stderr: []byte("err\n")}, code: 200, body: "out\nerr\n"},
		{name: "failure", resp: &runtimeapi.ExecSyncResponse{Stdout: []byte("x"), ExitCode: 3}, code: 500, body: "command \"cat /etc/hostname\" exited with code 3\nx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, _, addr := streamFixture(t, 0)
			rt.execSync = tt.resp
			resp, err := http.Post("http://"+addr+"/run/default/web/app?cmd="+url.QueryEscape("cat /etc/hostname"), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code || string(body) != tt.body {
				t.Errorf("= %d %q, want %d %q", resp.StatusCode, body, tt.code, tt.body)
			}
			if got := rt.syncs[0]; got.ContainerId != "app-1" || !slices.Equal(got.Cmd, []string{"cat", "/etc/hostname"}) {
				t.Errorf("ExecSync request %+v", got)
			}
		})
	}
}

func TestIsUpgradeRequest(t *testing.T) {
	tests := []struct {
		name, connection, upgrade string
		want                      bool
	}{
		{name: "spdy", connection: "Upgrade", upgrade: "SPDY/3.1", want: true},
		{name: "websocket list", connection: "keep-alive, upgrade", upgrade: "websocket", want: true},
		{name: "no upgrade header", connection: "Upgrade"},
		{name: "no connection token", upgrade: "websocket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/exec/a/b/c", nil)
			if tt.connection != "" {
				r.Header.Set("Connection", tt.connection)
			}
			if tt.upgrade != "" {
				r.Header.Set("Upgrade", tt.upgrade)
			}
			if got := isUpgradeRequest(r); got != tt.want {
				t.Errorf("isUpgradeRequest = %v", got)
			}
		})
	}
}
