package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// Authorization modes, spelled as in KubeletConfiguration.authorization.mode.
const (
	AuthorizationModeWebhook     = "Webhook"
	AuthorizationModeAlwaysAllow = "AlwaysAllow"
)

// Defaults applied by New when a Config field is zero.
const (
	defaultPort                  = 10250
	defaultTokenCacheTTL         = 2 * time.Minute
	defaultAuthorizedCacheTTL    = 5 * time.Minute
	defaultUnauthorizedCacheTTL  = 30 * time.Second
	defaultRuntimeRequestTimeout = 2 * time.Minute
	// maxHeaderBytes bounds request headers; the node API takes no large bodies.
	maxHeaderBytes = 1 << 20
	// idleTimeout closes a kept-alive connection with no request for this
	// long: the kubelet's value on :10250, which matches how long Go
	// clients (http.DefaultTransport) keep an idle connection.
	idleTimeout = 90 * time.Second
	// readHeaderTimeout closes a connection that does not finish its TLS
	// handshake or its request headers within this long. The kubelet sets
	// none and falls back on its 4 h read timeout; a client that opens a
	// connection and says nothing should not hold it that long.
	readHeaderTimeout = 30 * time.Second

	defaultMaxStreamsPerUser    = 128
	defaultMaxLogFollowsPerUser = 256
	defaultTokenReviewQPS       = 20
	defaultTokenReviewBurst     = 100
)

// PodLister returns the pods the agent runs (the desired pods, as /pods shows
// them). It must not block for long and must not hand out pods it mutates.
type PodLister func() []*v1.Pod

// Config configures the node's HTTPS API. Field names follow
// KubeletConfiguration where one exists.
type Config struct {
	// Address is the IP to listen on (address); "" or 0.0.0.0 means all.
	Address string
	// Port is the port (port); 0 means 10250. A negative port picks a free
	// one (tests).
	Port int32
	// NodeName is the node's name: the object authorized against
	// (nodes/<name>) and the subject of a self-signed serving certificate.
	NodeName string
	// NodeIPs are added to a self-signed serving certificate.
	NodeIPs []net.IP

	// ServingCertificate, when set, is where the serving certificate comes
	// from (serverTLSBootstrap); the TLS files below are then ignored.
	// Whoever made it runs it.
	ServingCertificate CertificateSource
	// TLSCertFile and TLSPrivateKeyFile hold the serving certificate,
	// reloaded when either changes on disk. When both are empty a
	// self-signed one is generated, or reused, in CertDir as kubelet.crt
	// and kubelet.key.
	TLSCertFile       string
	TLSPrivateKeyFile string
	// CertDir is where a self-signed certificate is kept.
	CertDir string
	// TLSMinVersion is a Go TLS version name (VersionTLS12, VersionTLS13);
	// empty means VersionTLS12.
	TLSMinVersion string
	// TLSCipherSuites are IANA cipher suite names; empty means Go's defaults.
	TLSCipherSuites []string

	// ClientCAFile holds the CAs that sign client certificates
	// (authentication.x509.clientCAFile), reloaded when it changes on
	// disk; empty disables x509 authentication.
	ClientCAFile string
	// AnonymousEnabled lets requests without credentials in as
	// system:anonymous (authentication.anonymous.enabled).
	AnonymousEnabled bool
	// WebhookAuthenticationEnabled checks bearer tokens with TokenReview
	// (authentication.webhook.enabled).
	WebhookAuthenticationEnabled bool
	// TokenCacheTTL is how long a token review is remembered
	// (authentication.webhook.cacheTTL); 0 means 2m. Refused tokens are
	// remembered as long, as the kubelet does.
	TokenCacheTTL time.Duration
	// TokenReviewQPS and TokenReviewBurst bound the TokenReviews sent for
	// tokens not in the cache (a token bucket: Burst at once, then QPS a
	// second); 0 means 20 and 100, negative means no limit. Over it a request
	// is answered 429 with Retry-After, without a review and without caching
	// anything, so that a flood of made-up tokens is not passed on to the
	// apiserver while a real client simply retries. Requests sharing one
	// review, and tokens in the cache, take nothing from the bucket. The
	// kubelet has no such limit: this is nodeagent's.
	TokenReviewQPS   float64
	TokenReviewBurst int

	// AuthorizationMode is Webhook or AlwaysAllow (authorization.mode).
	AuthorizationMode string
	// AuthorizedCacheTTL and UnauthorizedCacheTTL are how long
	// SubjectAccessReview answers are remembered
	// (authorization.webhook.cacheAuthorizedTTL / cacheUnauthorizedTTL);
	// 0 means 5m and 30s.
	AuthorizedCacheTTL   time.Duration
	UnauthorizedCacheTTL time.Duration

	// Client sends TokenReviews and SubjectAccessReviews. Required when
	// webhook authentication or Webhook authorization is on.
	Client kube.Interface
	// Runtime is the CRI runtime service; a runtimeapi.RuntimeServiceClient
	// satisfies it.
	Runtime RuntimeService
	// Pods lists the pods the agent runs.
	Pods PodLister
	// Timeline serves the pods' timelines at /debug/pods/ (pkg/timeline)
	// with the debugging handlers; nil leaves them out.
	Timeline http.Handler

	// StreamingConnectionIdleTimeout closes an exec, attach or port-forward
	// stream after this long without traffic, and a log stream whose client
	// has not taken a write for this long (streamingConnectionIdleTimeout);
	// 0 means no limit.
	StreamingConnectionIdleTimeout time.Duration
	// RuntimeRequestTimeout bounds each short CRI call; 0 means 2m.
	RuntimeRequestTimeout time.Duration

	// MaxStreamsPerUser caps the exec, attach and port-forward streams one
	// client identity (the authenticated user name) holds open at once;
	// MaxLogFollowsPerUser caps its followed logs (containerLogs with
	// follow=true). Past a cap the request is answered 429 naming the cap.
	// 0 means 128 and 256; negative means no cap. The kubelet has no such
	// caps: they are nodeagent's. The defaults are generous because
	// everything that comes through the apiserver (kubectl exec, logs -f,
	// port-forward) arrives as the apiserver's one identity, so the caps
	// bound all such traffic to the node together: 256 follows cover
	// following every container of a full node (maxPods 110) at once.
	MaxStreamsPerUser    int
	MaxLogFollowsPerUser int

	// Stats answers /stats/summary and /metrics/resource; nil leaves
	// them out.
	Stats SummaryProvider
	// CgroupStats answers /metrics/cadvisor; nil leaves it out.
	CgroupStats CgroupStatsProvider
	// Metrics serves /metrics and ProbeMetrics /metrics/probes; nil
	// leaves them out.
	Metrics      http.Handler
	ProbeMetrics http.Handler
	// MetricsRegistry is where the node API registers its own metrics
	// (nodeagent_token_reviews_total and the like); nil keeps them
	// unregistered.
	MetricsRegistry MetricsRegistry
	// Configz is the effective configuration /configz shows (a
	// KubeletConfiguration with its kind and apiVersion); nil leaves
	// /configz out.
	Configz any
	// EnableDebuggingHandlers (enableDebuggingHandlers) serves exec,
	// attach, portForward, run, containerLogs, runningpods and /configz;
	// without it they answer 405 "Debug endpoints are disabled." (/configz
	// 404), as on the kubelet. With EnableProfilingHandler
	// (enableProfilingHandler) too, the Go profiler is at /debug/pprof.
	EnableDebuggingHandlers bool
	EnableProfilingHandler  bool
	// EnableSystemLogHandler (enableSystemLogHandler) serves the files
	// under NodeLogDir at /logs/, with the debugging handlers; without it
	// /logs/ answers 405 "logs endpoint is disabled.". With
	// EnableSystemLogQuery (enableSystemLogQuery; the NodeLogQuery gate
	// is GA and locked on) /logs/?query= reads a service's journal or log
	// file too.
	EnableSystemLogHandler bool
	EnableSystemLogQuery   bool
	// NodeLogDir is the node's log directory; empty means /var/log.
	NodeLogDir string
}

// Server is the node's HTTPS API on :10250.
type Server struct {
	listener net.Listener
	tls      *tls.Config
	handler  http.Handler
	// idleTimeout and readHeaderTimeout are the constants of the same
	// names; tests shorten them.
	idleTimeout       time.Duration
	readHeaderTimeout time.Duration
	// reloaders keep the certificate files and client CA bundle current
	// while the server runs.
	reloaders []func(context.Context) error
}

// New validates cfg, loads or creates the serving certificate and binds the
// listener, so that a bad certificate or a busy port is reported at start-up.
func New(cfg Config) (*Server, error) {
	if err := applyDefaults(&cfg); err != nil {
		return nil, err
	}
	tlsCfg, certFiles, err := servingTLSConfig(cfg)
	if err != nil {
		return nil, err
	}
	var reloaders []func(context.Context) error
	if certFiles != nil {
		reloaders = append(reloaders, certFiles.Run)
	}
	metrics := newServerMetrics(cfg.MetricsRegistry)
	authn, err := newAuthenticator(cfg, metrics)
	if err != nil {
		return nil, err
	}
	authz, err := newAuthorizer(cfg)
	if err != nil {
		return nil, err
	}
	if cas := authn.clientCAs; cas != nil {
		reloaders = append(reloaders, cas.Run)
		tlsCfg.ClientAuth = tls.RequestClientCert
		// The bundle's names go out in the handshake (Go clients send a
		// certificate only for a CA listed there), so each connection
		// gets the bundle as it is now. Verification is authn's.
		base := tlsCfg.Clone()
		tlsCfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := base.Clone()
			c.ClientCAs = cas.Pool()
			return c, nil
		}
	}
	api := &api{
		nodeName:     cfg.NodeName,
		pods:         cfg.Pods,
		timeline:     cfg.Timeline,
		runtime:      cfg.Runtime,
		callTimeout:  cfg.RuntimeRequestTimeout,
		idleTimeout:  cfg.StreamingConnectionIdleTimeout,
		stats:        cfg.Stats,
		cgroups:      cfg.CgroupStats,
		metrics:      cfg.Metrics,
		probeMetrics: cfg.ProbeMetrics,
		configz:      cfg.Configz,
		debugging:    cfg.EnableDebuggingHandlers,
		profilingOn:  cfg.EnableProfilingHandler,
		streams:      newConcurrencyLimit(cfg.MaxStreamsPerUser, limitStreams, metrics),
		follows:      newConcurrencyLimit(cfg.MaxLogFollowsPerUser, limitLogFollows, metrics),
	}
	if cfg.EnableSystemLogHandler {
		api.nodeLogs = &nodeLogs{dir: cfg.NodeLogDir, query: cfg.EnableSystemLogQuery, journalctl: defaultJournalctl}
	}
	handler := withUpgradeFailureClose(withCanonicalPath(withAuth(authn, authz, api.routes())))

	port := int(cfg.Port)
	if port < 0 {
		port = 0
	}
	addr := net.JoinHostPort(cfg.Address, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the node API on %s: %w", addr, err)
	}
	return &Server{
		listener: l, tls: tlsCfg, handler: handler, reloaders: reloaders,
		idleTimeout: idleTimeout, readHeaderTimeout: readHeaderTimeout,
	}, nil
}

func applyDefaults(cfg *Config) error {
	if cfg.NodeName == "" {
		return errors.New("node API: node name is required")
	}
	if cfg.Address != "" && net.ParseIP(cfg.Address) == nil {
		return fmt.Errorf("node API: address %q is not an IP address", cfg.Address)
	}
	if cfg.Port > 65535 {
		return fmt.Errorf("node API: port %d is out of range", cfg.Port)
	}
	if cfg.Port == 0 {
		cfg.Port = defaultPort
	}
	if cfg.Runtime == nil {
		return errors.New("node API: a CRI runtime service is required")
	}
	if cfg.Pods == nil {
		return errors.New("node API: a pod lister is required")
	}
	if cfg.TokenCacheTTL == 0 {
		cfg.TokenCacheTTL = defaultTokenCacheTTL
	}
	if cfg.AuthorizedCacheTTL == 0 {
		cfg.AuthorizedCacheTTL = defaultAuthorizedCacheTTL
	}
	if cfg.UnauthorizedCacheTTL == 0 {
		cfg.UnauthorizedCacheTTL = defaultUnauthorizedCacheTTL
	}
	if cfg.RuntimeRequestTimeout == 0 {
		cfg.RuntimeRequestTimeout = defaultRuntimeRequestTimeout
	}
	if cfg.NodeLogDir == "" {
		cfg.NodeLogDir = DefaultNodeLogDir
	}
	if cfg.MaxStreamsPerUser == 0 {
		cfg.MaxStreamsPerUser = defaultMaxStreamsPerUser
	}
	if cfg.MaxLogFollowsPerUser == 0 {
		cfg.MaxLogFollowsPerUser = defaultMaxLogFollowsPerUser
	}
	if cfg.TokenReviewQPS == 0 {
		cfg.TokenReviewQPS = defaultTokenReviewQPS
	}
	if cfg.TokenReviewBurst == 0 {
		cfg.TokenReviewBurst = defaultTokenReviewBurst
	}
	if cfg.StreamingConnectionIdleTimeout < 0 {
		return fmt.Errorf("node API: streamingConnectionIdleTimeout %s is negative", cfg.StreamingConnectionIdleTimeout)
	}
	return nil
}

// Addr is the address actually listened on.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Handler is the whole API behind TLS: path checks, authentication,
// authorization and the endpoints. Tests drive it without a listener.
func (s *Server) Handler() http.Handler { return s.handler }

// Run serves until ctx ends. Open streams are cut when it returns: an exec
// session must not keep the agent from exiting.
func (s *Server) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	// The kubelet's 4 h ReadTimeout and WriteTimeout are left out: they
	// would cut a followed log at 4 h however lively. Streams and follows
	// end by StreamingConnectionIdleTimeout and are capped per user instead.
	srv := &http.Server{
		Handler:           s.handler,
		TLSConfig:         s.tls,
		ReadHeaderTimeout: s.readHeaderTimeout,
		IdleTimeout:       s.idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	reloadCtx, stopReloads := context.WithCancel(ctx)
	var reloads sync.WaitGroup
	for _, run := range s.reloaders {
		reloads.Go(func() { _ = run(reloadCtx) })
	}
	defer func() {
		stopReloads()
		reloads.Wait()
	}()
	errCh := make(chan error, 1)
	// ServeTLS offers HTTP/2 only when the configured suites allow it.
	go func() { errCh <- srv.ServeTLS(s.listener, "", "") }()
	logger.Info("Serving the node API", "address", s.Addr())
	select {
	case err := <-errCh:
		return fmt.Errorf("serve node API: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// Long-running streams (logs -f, exec) do not end on their own.
		_ = srv.Close()
	}
	if err := <-errCh; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve node API: %w", err)
	}
	return nil
}
