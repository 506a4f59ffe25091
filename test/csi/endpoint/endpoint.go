// Package endpoint serves the test CSI drivers' gRPC on the unix socket a
// CSI endpoint names.
package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// SocketPath returns the path of a unix endpoint: unix:///p, unix:/p, unix://p or p.
func SocketPath(endpoint string) (string, error) {
	p := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		p = strings.TrimPrefix(rest, "//")
	} else if strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("endpoint %q: only unix sockets are served", endpoint)
	}
	if p == "" {
		return "", fmt.Errorf("endpoint %q: no socket path", endpoint)
	}
	return p, nil
}

// Listen listens on the endpoint's socket, replacing one an earlier run left
// behind; the caller removes the socket (the returned path) when done.
func Listen(endpoint string) (net.Listener, string, error) {
	path, err := SocketPath(endpoint)
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, "", err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, "", err
	}
	return lis, path, nil
}

// Serve serves srv on lis until ctx ends, then stops it gracefully, forcing the stop of
// calls still running after five seconds. It returns Serve's error if serving ends first.
func Serve(ctx context.Context, srv *grpc.Server, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
		<-stopped
	}
	<-errc
	return nil
}
