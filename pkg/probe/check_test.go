package probe

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	testclock "k8s.io/utils/clock/testing"
	utilexec "k8s.io/utils/exec"
)

// fakeExec answers ExecSync with a canned reply and records the call.
type fakeExec struct {
	stdout, stderr string
	err            error
	gotCmd         []string
	gotTimeout     time.Duration
}

func (f *fakeExec) ExecSync(_ context.Context, _ string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	f.gotCmd, f.gotTimeout = cmd, timeout
	return []byte(f.stdout), []byte(f.stderr), f.err
}

func newTestManager(t *testing.T, exec Execer) *Manager {
	t.Helper()
	m, err := NewManager(Config{Exec: exec, Recorder: record.NewFakeRecorder(10), Clock: testclock.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func target(ip string, ports ...v1.ContainerPort) Target {
	return Target{Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}},
		Container: &v1.Container{Name: "app", Ports: ports}, ContainerID: "c1", PodIP: ip}
}

func TestExecProbe(t *testing.T) {
	tests := []struct {
		name    string
		exec    fakeExec
		want    outcome
		wantOut string
		wantErr bool
	}{
		{name: "exit 0", exec: fakeExec{stdout: "ok"}, want: outcomeSuccess, wantOut: "ok"},
		{name: "exit 1 gives its output", exec: fakeExec{stdout: "out ", stderr: "bad", err: utilexec.CodeExitError{Err: errors.New("exit"), Code: 1}},
			want: outcomeFailure, wantOut: "out bad"},
		{name: "runtime's timeout", exec: fakeExec{err: grpcstatus.Error(codes.DeadlineExceeded, "timeout 1s exceeded")},
			want: outcomeFailure, wantOut: `command "cat /tmp/healthy" timed out`},
		{name: "call deadline", exec: fakeExec{err: context.DeadlineExceeded}, want: outcomeFailure, wantOut: `command "cat /tmp/healthy" timed out`},
		{name: "other errors are no verdict", exec: fakeExec{err: grpcstatus.Error(codes.NotFound, "no such container")}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestManager(t, &tt.exec)
			p := &v1.Probe{TimeoutSeconds: 3, ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/tmp/healthy"}}}}
			got, out, err := m.check.probe(context.Background(), target("10.0.0.1"), p)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v", err)
			}
			if tt.wantErr {
				return
			}
			if got != tt.want || out != tt.wantOut {
				t.Errorf("got %v %q, want %v %q", got, out, tt.want, tt.wantOut)
			}
			if tt.exec.gotTimeout != 3*time.Second {
				t.Errorf("ExecSync timeout %v, want the probe's 3s", tt.exec.gotTimeout)
			}
		})
	}
}

func hostPort(t *testing.T, rawURL string) (string, int) {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	return u.Hostname(), port
}

func TestHTTPProbe(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer other.Close()
	var gotUA, gotAccept, gotHost, gotCustom, gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotUA, gotAccept, gotHost, gotCustom, gotQuery = r.UserAgent(), r.Header.Get("Accept"), r.Host, r.Header.Get("X-Custom"), r.URL.RawQuery
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte("fine"))
		case "/fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "/here":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/away":
			http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/x", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	}))
	defer srv.Close()
	ip, port := hostPort(t, srv.URL)
	named := v1.ContainerPort{Name: "http", ContainerPort: int32(port)}
	tests := []struct {
		name    string
		action  v1.HTTPGetAction
		want    outcome
		wantOut string
		check   func(t *testing.T)
	}{
		{name: "2xx by port number", action: v1.HTTPGetAction{Path: "/ok?x=1", Port: intstr.FromInt32(int32(port))}, want: outcomeSuccess, wantOut: "fine",
			check: func(t *testing.T) {
				if gotUA != "kube-probe/1.37" || gotAccept != "*/*" || gotQuery != "x=1" {
					t.Errorf("UA %q Accept %q query %q", gotUA, gotAccept, gotQuery)
				}
			}},
		{name: "port by name, headers and Host", action: v1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("http"),
			HTTPHeaders: []v1.HTTPHeader{{Name: "X-Custom", Value: "v"}, {Name: "Host", Value: "example.test"}, {Name: "User-Agent", Value: "mine"}}},
			want: outcomeSuccess, wantOut: "fine",
			check: func(t *testing.T) {
				if gotCustom != "v" || gotHost != "example.test" || gotUA != "mine" {
					t.Errorf("custom %q host %q UA %q", gotCustom, gotHost, gotUA)
				}
			}},
		{name: "5xx", action: v1.HTTPGetAction{Path: "/fail", Port: intstr.FromString("http")}, want: outcomeFailure,
			wantOut: "HTTP probe failed with statuscode: 500"},
		{name: "same-host redirect is followed", action: v1.HTTPGetAction{Path: "/here", Port: intstr.FromString("http")}, want: outcomeSuccess, wantOut: "fine"},
		{name: "redirect elsewhere is a warning", action: v1.HTTPGetAction{Path: "/away", Port: intstr.FromString("http")}, want: outcomeWarning,
			wantOut: "Probe terminated redirects, Response body: "},
		{name: "redirect loop", action: v1.HTTPGetAction{Path: "/loop", Port: intstr.FromString("http")}, want: outcomeFailure,
			wantOut: `Get "/loop": stopped after 10 redirects`},
	}
	m := newTestManager(t, &fakeExec{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &v1.Probe{TimeoutSeconds: 2, ProbeHandler: v1.ProbeHandler{HTTPGet: &tt.action}}
			got, out, err := m.check.probe(context.Background(), target(ip, named), p)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || !strings.Contains(out, tt.wantOut) {
				t.Errorf("got %v %q, want %v %q", got, out, tt.want, tt.wantOut)
			}
			if tt.check != nil {
				tt.check(t)
			}
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		closedPort := l.Addr().(*net.TCPAddr).Port
		l.Close()
		p := &v1.Probe{TimeoutSeconds: 1, ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(int32(closedPort))}}}
		got, out, err := m.check.probe(context.Background(), target("127.0.0.1"), p)
		if err != nil || got != outcomeFailure || !strings.Contains(out, "connection refused") {
			t.Errorf("got %v %q %v", got, out, err)
		}
	})
	t.Run("unknown port name", func(t *testing.T) {
		p := &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("nope")}}}
		if _, _, err := m.check.probe(context.Background(), target(ip), p); err == nil || err.Error() != "port nope not found" {
			t.Errorf("err %v", err)
		}
	})
}

func TestTCPProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	m := newTestManager(t, &fakeExec{})
	p := &v1.Probe{TimeoutSeconds: 1, ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}}
	if got, out, err := m.check.probe(context.Background(), target("127.0.0.1"), p); got != outcomeSuccess || err != nil {
		t.Errorf("open port: %v %q %v", got, out, err)
	}
	l.Close()
	if got, out, err := m.check.probe(context.Background(), target("127.0.0.1"), p); got != outcomeFailure || err != nil || !strings.Contains(out, "connection refused") {
		t.Errorf("closed port: %v %q %v", got, out, err)
	}
}

func TestGRPCProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	port := int32(l.Addr().(*net.TCPAddr).Port)
	m := newTestManager(t, &fakeExec{})
	svc := "db"
	p := &v1.Probe{TimeoutSeconds: 2, ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: port, Service: &svc}}}

	hs.SetServingStatus("db", healthpb.HealthCheckResponse_SERVING)
	if got, out, err := m.check.probe(context.Background(), target("127.0.0.1"), p); got != outcomeSuccess || err != nil {
		t.Errorf("serving: %v %q %v", got, out, err)
	}
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	if got, out, _ := m.check.probe(context.Background(), target("127.0.0.1"), p); got != outcomeFailure || out != `service unhealthy (responded with "NOT_SERVING")` {
		t.Errorf("not serving: %v %q", got, out)
	}
}

func TestHooks(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if r.UserAgent() != "kube-lifecycle/1.37" {
			t.Errorf("hook User-Agent %q", r.UserAgent())
		}
		w.WriteHeader(http.StatusInternalServerError) // a hook's status code does not matter
	}))
	defer srv.Close()
	ip, port := hostPort(t, srv.URL)
	exec := &fakeExec{stdout: "boom", err: utilexec.CodeExitError{Err: errors.New("command 'false' exited with 1: "), Code: 1}}
	m := newTestManager(t, exec)
	ctx := context.Background()

	msg, err := m.RunHook(ctx, target(ip), &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"false"}}})
	want := `Exec lifecycle hook ([false]) for Container "app" in Pod "p_ns(u)" failed - error: command 'false' exited with 1: , message: "boom"`
	if err == nil || msg != want {
		t.Errorf("exec hook: %q %v\nwant %q", msg, err, want)
	}
	if _, err := m.RunHook(ctx, target(ip), &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/stop", Port: intstr.FromInt32(int32(port))}}); err != nil || hits != 1 {
		t.Errorf("http hook: %v, %d requests", err, hits)
	}

	// A sleep hook waits on the clock, and is cut short by its context.
	fc := m.cfg.Clock.(*testclock.FakeClock)
	done := make(chan error, 1)
	go func() {
		_, err := m.RunHook(ctx, target(ip), &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}})
		done <- err
	}()
	for !fc.HasWaiters() {
		goruntime.Gosched()
	}
	fc.Step(5 * time.Second)
	if err := <-done; err != nil {
		t.Errorf("sleep hook: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	msg, err = m.RunHook(cctx, target(ip), &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}})
	if !errors.Is(err, errSleepCut) || !strings.HasPrefix(msg, `Sleep lifecycle hook (5) for Container "app"`) {
		t.Errorf("cut sleep hook: %q %v", msg, err)
	}
}
