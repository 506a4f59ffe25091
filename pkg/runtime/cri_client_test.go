package runtime

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeCRI serves the few runtime and image calls the client makes.
type fakeCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
}

func (f *fakeCRI) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "v2.1.0", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeCRI) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: false, Reason: "NetworkPluginNotReady", Message: "cni plugin not initialized"},
	}}}, nil
}

func (f *fakeCRI) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "sha256:1", RepoTags: []string{"pause:3.10"}, Size: 1}}}, nil
}

func serveFake(t *testing.T, socket string) func() {
	t.Helper()
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	f := &fakeCRI{}
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	runtimeapi.RegisterImageServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	return srv.Stop
}

func shortTempDir(t *testing.T) string {
	t.Helper()
	// unix socket paths are limited to ~108 bytes; t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		name       string
		endpoint   string
		wantSocket string
		wantErr    bool
	}{
		{name: "unix url", endpoint: "unix:///run/containerd/containerd.sock", wantSocket: "/run/containerd/containerd.sock"},
		{name: "plain path", endpoint: "/run/crio/crio.sock", wantSocket: "/run/crio/crio.sock"},
		{name: "empty", endpoint: "", wantErr: true},
		{name: "tcp", endpoint: "tcp://localhost:1234", wantErr: true},
		{name: "host instead of path", endpoint: "unix://run/containerd.sock", wantErr: true},
		{name: "relative", endpoint: "containerd.sock", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, socket, err := ParseEndpoint(tt.endpoint)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidEndpoint) {
					t.Fatalf("want ErrInvalidEndpoint, got %v", err)
				}
				return
			}
			if err != nil || socket != tt.wantSocket {
				t.Fatalf("got %q, %v; want %q", socket, err, tt.wantSocket)
			}
		})
	}
}

func TestClientCalls(t *testing.T) {
	socket := filepath.Join(shortTempDir(t), "cri.sock")
	stop := serveFake(t, socket)
	defer stop()

	c, err := NewClient(Config{Endpoint: "unix://" + socket, CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	v, err := c.Version(ctx)
	if err != nil || v.RuntimeName != "containerd" || v.RuntimeVersion != "v2.1.0" {
		t.Fatalf("Version = %v, %v", v, err)
	}
	s, err := c.Status(ctx)
	if err != nil || len(s.Status.Conditions) != 2 {
		t.Fatalf("Status = %v, %v", s, err)
	}
	imgs, err := c.ListImages(ctx)
	if err != nil || len(imgs) != 1 || imgs[0].RepoTags[0] != "pause:3.10" {
		t.Fatalf("ListImages = %v, %v", imgs, err)
	}
}

func TestClientMissingSocket(t *testing.T) {
	socket := filepath.Join(shortTempDir(t), "absent.sock")
	c, err := NewClient(Config{Endpoint: socket, CallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Version(context.Background())
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("want a clear missing-socket error, got %v", err)
	}
}

func TestClientReconnects(t *testing.T) {
	socket := filepath.Join(shortTempDir(t), "cri.sock")
	stop := serveFake(t, socket)
	c, err := NewClient(Config{Endpoint: socket, CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop()
	os.Remove(socket)
	stop = serveFake(t, socket)
	defer stop()
	// The first call may see the old connection break; gRPC then reconnects
	// with back-off on its own. Wait on connection state changes, not time.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, err := c.Version(ctx)
		if err == nil {
			return
		}
		state := c.conn.GetState()
		c.conn.Connect()
		if !c.conn.WaitForStateChange(ctx, state) {
			t.Fatalf("runtime never came back: %v", err)
		}
	}
}
