// Package registrar registers a CSI driver with the node agent through the kubelet's
// plugin registration API: the project's stand-in for node-driver-registrar.
//
// It asks the driver for its name (Identity.GetPluginInfo), then serves
// pluginregistration.v1.Registration on <registration dir>/<name>-reg.sock, where the
// agent's plugin watcher finds it. GetInfo tells the agent the driver's socket as the
// agent sees it (the kubelet registration path, not the path inside this container).
// When the agent reports that registration failed, Run returns an error, so that the
// container restarts and registration starts over, as upstream's registrar does.
package registrar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// SupportedVersions are the CSI versions GetInfo announces.
var SupportedVersions = []string{"1.0.0"}

// Config says which driver to register and where.
type Config struct {
	// CSIAddress is the driver's socket as this process sees it: a path or unix://path.
	CSIAddress string
	// KubeletRegistrationPath is the driver's socket as the node agent sees it.
	KubeletRegistrationPath string
	// RegistrationDir is the agent's plugin registration directory as this process sees
	// it. Default /registration.
	RegistrationDir string
	// HealthAddr, when set, serves GET /healthz there: 200 while the registration socket
	// answers GetInfo.
	HealthAddr string
	// ConnectTimeout bounds each attempt to reach the driver; attempts repeat until the
	// driver answers or ctx ends. Default 10s.
	ConnectTimeout time.Duration
}

// Registrar serves the registration socket of one driver.
type Registrar struct {
	cfg Config
	// failed carries the agent's error when it reports a failed registration.
	failed chan error
	once   sync.Once
}

// New validates cfg and fills its defaults.
func New(cfg Config) (*Registrar, error) {
	if cfg.RegistrationDir == "" {
		cfg.RegistrationDir = "/registration"
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	switch {
	case cfg.CSIAddress == "":
		return nil, errors.New("CSI address missing")
	case cfg.KubeletRegistrationPath == "":
		return nil, errors.New("kubelet registration path missing")
	case !filepath.IsAbs(cfg.KubeletRegistrationPath):
		return nil, fmt.Errorf("kubelet registration path %q: not an absolute path", cfg.KubeletRegistrationPath)
	}
	return &Registrar{cfg: cfg, failed: make(chan error, 1)}, nil
}

// Run gets the driver's name, serves the registration socket until ctx ends or the agent
// reports a failed registration, and removes the socket before it returns.
func (r *Registrar) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	name, err := r.driverName(ctx)
	if err != nil {
		return err
	}
	logger = logger.WithValues("driver", name)
	sock := SocketPath(r.cfg.RegistrationDir, name)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	defer os.Remove(sock)
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registration{r: r, name: name, logger: logger})
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(lis) }()
	defer stopServer(srv)
	if r.cfg.HealthAddr != "" {
		h, err := r.serveHealth(sock)
		if err != nil {
			return err
		}
		defer h.Close()
	}
	logger.Info("Registration socket ready", "socket", sock, "endpoint", r.cfg.KubeletRegistrationPath)
	select {
	case <-ctx.Done():
		logger.Info("Stopping; removing the registration socket", "socket", sock)
		return nil
	case err := <-r.failed:
		return fmt.Errorf("the node agent did not register driver %s: %w", name, err)
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", sock, err)
	}
}

// stopServer lets calls in flight finish (the agent's NotifyRegistrationStatus gets its
// answer before a failed registration ends Run), for a few seconds at most.
func stopServer(srv *grpc.Server) {
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		srv.Stop()
		<-done
	}
}

// SocketPath is where the registration socket of driver name lives under dir.
func SocketPath(dir, name string) string { return filepath.Join(dir, name+"-reg.sock") }

// driverName asks the driver for its name, trying again until it answers or ctx ends: the
// driver container may start after this one.
func (r *Registrar) driverName(ctx context.Context) (string, error) {
	logger := klog.FromContext(ctx)
	target := "unix://" + strings.TrimPrefix(strings.TrimPrefix(r.cfg.CSIAddress, "unix://"), "unix:")
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("CSI address %q: %w", r.cfg.CSIAddress, err)
	}
	defer conn.Close()
	client := csi.NewIdentityClient(conn)
	for {
		callCtx, cancel := context.WithTimeout(ctx, r.cfg.ConnectTimeout)
		info, err := client.GetPluginInfo(callCtx, &csi.GetPluginInfoRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil && info.GetName() != "" {
			return info.GetName(), nil
		}
		if err == nil {
			err = errors.New("the driver returned an empty name")
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("get the driver's name from %s: %w", r.cfg.CSIAddress, err)
		}
		logger.Info("Driver not ready; trying again", "address", r.cfg.CSIAddress, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// fail records the agent's failure report; only the first counts.
func (r *Registrar) fail(err error) {
	r.once.Do(func() { r.failed <- err })
}

// serveHealth answers /healthz by calling GetInfo on the registration socket, which shows
// that the socket is still there and served.
func (r *Registrar) serveHealth(sock string) (*http.Server, error) {
	lis, err := net.Listen("tcp", r.cfg.HealthAddr)
	if err != nil {
		return nil, fmt.Errorf("health endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
		defer cancel()
		if err := checkSocket(ctx, sock); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	return srv, nil
}

// checkSocket calls GetInfo on a registration socket.
func checkSocket(ctx context.Context, sock string) error {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	return err
}

// registration is the Registration service of one driver.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	r      *Registrar
	name   string
	logger klog.Logger
}

var _ registerapi.RegistrationServer = (*registration)(nil)

// GetInfo tells the agent what the plugin is and where its CSI socket is.
func (g *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	g.logger.V(2).Info("GetInfo")
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              g.name,
		Endpoint:          g.r.cfg.KubeletRegistrationPath,
		SupportedVersions: SupportedVersions,
	}, nil
}

// NotifyRegistrationStatus logs the agent's verdict; a failure stops Run.
func (g *registration) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.GetPluginRegistered() {
		g.logger.Info("Registered with the node agent")
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	g.logger.Error(errors.New(st.GetError()), "The node agent failed to register the driver")
	g.r.fail(errors.New(st.GetError()))
	return &registerapi.RegistrationStatusResponse{}, nil
}
