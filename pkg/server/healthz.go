// Package server holds the node's HTTP endpoints: the plain healthz
// listener kubeadm polls (healthzBindAddress:healthzPort), and the node API
// on :10250 (Server) that the apiserver calls for logs, exec, attach and
// port-forward, behind x509/token authentication and SubjectAccessReview
// authorization.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"k8s.io/klog/v2"
)

// shutdownTimeout bounds how long in-flight health checks may delay exit.
const shutdownTimeout = 5 * time.Second

// HealthzConfig configures the healthz listener.
type HealthzConfig struct {
	// BindAddress is the address to listen on, e.g. 127.0.0.1.
	BindAddress string
	// Port is the port; 0 picks a free one (tests), and the kubelet's
	// "healthzPort: 0 disables" rule is applied by the caller.
	Port int32
}

// Healthz serves "ok" at /healthz over plain HTTP.
type Healthz struct {
	addr     string
	listener net.Listener
}

// NewHealthz validates cfg and binds the listener, so a busy port is
// reported at start-up rather than later.
func NewHealthz(cfg HealthzConfig) (*Healthz, error) {
	if net.ParseIP(cfg.BindAddress) == nil {
		return nil, fmt.Errorf("healthzBindAddress %q is not an IP address", cfg.BindAddress)
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("healthzPort %d is out of range", cfg.Port)
	}
	addr := net.JoinHostPort(cfg.BindAddress, strconv.Itoa(int(cfg.Port)))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for healthz on %s: %w", addr, err)
	}
	return &Healthz{addr: l.Addr().String(), listener: l}, nil
}

// Addr is the address actually listened on.
func (h *Healthz) Addr() string { return h.addr }

// Handler answers the health endpoints.
func Handler() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte("ok"))
	}
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/healthz/ping", ok)
	return mux
}

// Run serves until ctx ends, then shuts down gracefully.
func (h *Healthz) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	srv := &http.Server{Handler: Handler(), ReadHeaderTimeout: 10 * time.Second}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(h.listener) }()
	logger.Info("Serving healthz", "address", h.addr)
	select {
	case err := <-errCh:
		return fmt.Errorf("serve healthz: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("stop healthz: %w", err)
	}
	if err := <-errCh; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve healthz: %w", err)
	}
	return nil
}
