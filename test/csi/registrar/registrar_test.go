package registrar

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// fakeDriver is a CSI identity service that answers GetPluginInfo and counts the calls.
type fakeDriver struct {
	csi.UnimplementedIdentityServer
	name  string
	mu    sync.Mutex
	calls int
}

func (f *fakeDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return &csi.GetPluginInfoResponse{Name: f.name, VendorVersion: "test"}, nil
}

// serveDriver serves f on sock until the test ends.
func serveDriver(t *testing.T, f *fakeDriver, sock string) {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// shortDir is a temporary directory with a path short enough for unix sockets.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// started is a Registrar running in the background.
type started struct {
	done   chan error
	cancel context.CancelFunc
	sock   string
}

func start(t *testing.T, cfg Config, name string) *started {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{done: make(chan error, 1), cancel: cancel, sock: SocketPath(cfg.RegistrationDir, name)}
	go func() { s.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	return s
}

// client dials the registration socket once it exists, as the agent's plugin watcher does.
func (s *started) client(t *testing.T) registerapi.RegistrationClient {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, err := os.Stat(s.sock); err == nil && st.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("registration socket %s did not appear", s.sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+s.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

func (s *started) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func TestGetInfoAndRegistered(t *testing.T) {
	dir := shortDir(t)
	driverSock := filepath.Join(dir, "csi.sock")
	f := &fakeDriver{name: "hostpath.csi.test"}
	serveDriver(t, f, driverSock)
	regDir := filepath.Join(dir, "registry")
	if err := os.Mkdir(regDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := start(t, Config{CSIAddress: "unix://" + driverSock, KubeletRegistrationPath: "/var/lib/kubelet/plugins/hostpath/csi.sock", RegistrationDir: regDir}, f.name)
	c := s.client(t)
	ctx := context.Background()

	info, err := c.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != f.name || info.Endpoint != "/var/lib/kubelet/plugins/hostpath/csi.sock" ||
		len(info.SupportedVersions) != 1 || info.SupportedVersions[0] != "1.0.0" {
		t.Errorf("GetInfo = %+v", info)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if err := checkSocket(ctx, s.sock); err != nil {
		t.Errorf("health check of a served socket: %v", err)
	}
	select {
	case err := <-s.done:
		t.Fatalf("Run returned after a successful registration: %v", err)
	case <-time.After(100 * time.Millisecond):
	}

	s.cancel()
	if err := s.wait(t); err != nil {
		t.Errorf("Run after its context ended = %v, want nil", err)
	}
	if _, err := os.Stat(s.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registration socket left behind: %v", err)
	}
	if err := checkSocket(ctx, s.sock); err == nil {
		t.Error("health check of a removed socket succeeded")
	}
}

func TestRegistrationFailedStopsRun(t *testing.T) {
	dir := shortDir(t)
	driverSock := filepath.Join(dir, "csi.sock")
	f := &fakeDriver{name: "d"}
	serveDriver(t, f, driverSock)
	s := start(t, Config{CSIAddress: driverSock, KubeletRegistrationPath: "/p/csi.sock", RegistrationDir: dir}, f.name)
	c := s.client(t)
	if _, err := c.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{Error: "unsupported version"}); err != nil {
		t.Fatal(err)
	}
	err := s.wait(t)
	if err == nil || !strings.Contains(err.Error(), "unsupported version") {
		t.Errorf("Run = %v, want the agent's error", err)
	}
	if _, err := os.Stat(s.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registration socket left behind: %v", err)
	}
}

func TestStaleSocketReplacedAndLateDriver(t *testing.T) {
	dir := shortDir(t)
	driverSock := filepath.Join(dir, "csi.sock")
	f := &fakeDriver{name: "late"}
	stale := SocketPath(dir, f.name)
	if err := os.WriteFile(stale, []byte("left by a killed registrar"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := start(t, Config{CSIAddress: driverSock, KubeletRegistrationPath: "/p/csi.sock", RegistrationDir: dir, ConnectTimeout: 200 * time.Millisecond}, f.name)
	time.Sleep(300 * time.Millisecond) // the registrar is waiting for the driver
	serveDriver(t, f, driverSock)
	info, err := s.client(t).GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "late" {
		t.Errorf("name %q", info.Name)
	}
}

func TestNewValidates(t *testing.T) {
	base := Config{CSIAddress: "/csi/csi.sock", KubeletRegistrationPath: "/var/lib/kubelet/plugins/d/csi.sock"}
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		wantErr bool
	}{
		{name: "valid", mutate: func(*Config) {}},
		{name: "no CSI address", mutate: func(c *Config) { c.CSIAddress = "" }, wantErr: true},
		{name: "no registration path", mutate: func(c *Config) { c.KubeletRegistrationPath = "" }, wantErr: true},
		{name: "relative registration path", mutate: func(c *Config) { c.KubeletRegistrationPath = "plugins/d/csi.sock" }, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			r, err := New(cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && r.cfg.RegistrationDir != "/registration" {
				t.Errorf("default registration dir %q", r.cfg.RegistrationDir)
			}
		})
	}
}
