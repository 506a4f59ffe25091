// Package runtime holds the agent's connection to a CRI container runtime
// (containerd, CRI-O) and, later, the translation of pods into CRI calls.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxMsgSize matches what runtimes send for large lists (images, containers).
const maxMsgSize = 16 * 1024 * 1024

// DefaultCallTimeout bounds a single CRI call when Config.CallTimeout is zero.
const DefaultCallTimeout = 2 * time.Minute

// ErrInvalidEndpoint is returned when the CRI endpoint cannot be used at all.
var ErrInvalidEndpoint = errors.New("invalid container runtime endpoint")

// Config configures a CRI client.
type Config struct {
	// Endpoint is the runtime socket: "unix:///run/containerd/containerd.sock"
	// or a plain absolute path.
	Endpoint string
	// CallTimeout bounds every call (runtimeRequestTimeout in the kubelet).
	// Zero means DefaultCallTimeout.
	CallTimeout time.Duration
	// Interceptors wrap every unary call, in order (metrics).
	Interceptors []grpc.UnaryClientInterceptor
	// StatsHandlers see every call and stream (tracing: they open the
	// calls' spans and hand the trace context on to the runtime).
	StatsHandlers []stats.Handler
}

// Client talks to the runtime and image services of one CRI endpoint. The
// connection is established lazily and re-established by gRPC with back-off
// when the runtime restarts, so a Client stays usable across restarts.
type Client struct {
	endpoint string
	timeout  time.Duration
	conn     *grpc.ClientConn
	rt       runtimeapi.RuntimeServiceClient
	img      runtimeapi.ImageServiceClient
}

// ParseEndpoint turns a CRI endpoint into a gRPC target and the socket path.
// Only unix sockets are supported, as on Linux kubelets.
func ParseEndpoint(endpoint string) (target, socket string, err error) {
	if endpoint == "" {
		return "", "", fmt.Errorf("%w: empty", ErrInvalidEndpoint)
	}
	if strings.HasPrefix(endpoint, "/") {
		return "unix://" + filepath.Clean(endpoint), filepath.Clean(endpoint), nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", "", fmt.Errorf("%w %q: %w", ErrInvalidEndpoint, endpoint, err)
	}
	if u.Scheme != "unix" {
		return "", "", fmt.Errorf("%w %q: scheme %q is not supported, use unix:///path/to/socket", ErrInvalidEndpoint, endpoint, u.Scheme)
	}
	path := u.Path
	if path == "" {
		path = u.Opaque
	}
	if u.Host != "" || !strings.HasPrefix(path, "/") {
		return "", "", fmt.Errorf("%w %q: want an absolute socket path, as in unix:///run/containerd/containerd.sock", ErrInvalidEndpoint, endpoint)
	}
	return "unix://" + filepath.Clean(path), filepath.Clean(path), nil
}

// answerBuffers hold the answers gRPC reads, the runtime's and the CSI
// drivers': the default pool, which the proto codec takes its buffers from
// whatever the connection's pool (so it is set in init). Frames and
// small answers come from pools at every power of two from 256 B to 64 KiB;
// an answer over 64 KiB (the PLEG's list of the containers of 100 pods is
// some 150 KB, every second) gets a buffer of its own size that the garbage
// collector takes back. Pooled in gRPC's default tiers (32 KiB, then
// 1 MiB), two 1-MiB buffers stayed live from one list to the next: 2.2 MB
// of a 9-MB live heap at 100 pods, counted twice in the heap the collector
// lets grow (BENCHMARKS.md, the night's runs).
var answerBuffers mem.BufferPool = smallPooled{pool: func() mem.BufferPool {
	exps := make([]uint8, 0, 9)
	for e := uint8(8); e <= maxPooledExp; e++ {
		exps = append(exps, e)
	}
	p, err := mem.NewBinaryTieredBufferPool(exps...)
	if err != nil {
		panic(err)
	}
	return p
}()}

func init() { experimental.SetDefaultBufferPool(answerBuffers) }

// maxPooledExp is the largest pooled buffer's size, as a power of two.
const maxPooledExp = 16

// smallPooled pools buffers up to 1<<maxPooledExp bytes and allocates the
// larger ones.
type smallPooled struct{ pool mem.BufferPool }

func (p smallPooled) Get(n int) *[]byte {
	if n > 1<<maxPooledExp {
		b := make([]byte, n)
		return &b
	}
	return p.pool.Get(n)
}

func (p smallPooled) Put(b *[]byte) {
	if cap(*b) > 1<<maxPooledExp {
		return
	}
	p.pool.Put(b)
}

// NewClient validates the endpoint and prepares a connection. It does not
// wait for the runtime: use Version to check that it answers.
func NewClient(cfg Config) (*Client, error) {
	target, _, err := ParseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithChainUnaryInterceptor(cfg.Interceptors...),
	}
	for _, h := range cfg.StatsHandlers {
		opts = append(opts, grpc.WithStatsHandler(h))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to container runtime %q: %w", cfg.Endpoint, err)
	}
	return &Client{
		endpoint: cfg.Endpoint,
		timeout:  cfg.CallTimeout,
		conn:     conn,
		rt:       runtimeapi.NewRuntimeServiceClient(conn),
		img:      runtimeapi.NewImageServiceClient(conn),
	}, nil
}

// Close releases the connection.
func (c *Client) Close() error {
	return c.conn.Close()
}

// Endpoint returns the endpoint the client was built for.
func (c *Client) Endpoint() string { return c.endpoint }

func (c *Client) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// explain adds the endpoint and, when the socket is missing, says so plainly:
// gRPC's own message for that case is easy to misread.
func (c *Client) explain(op string, err error) error {
	if _, socket, perr := ParseEndpoint(c.endpoint); perr == nil {
		if _, serr := os.Stat(socket); errors.Is(serr, os.ErrNotExist) {
			return fmt.Errorf("%s: container runtime endpoint %q: socket %s does not exist: %w", op, c.endpoint, socket, err)
		}
	}
	return fmt.Errorf("%s: container runtime endpoint %q: %w", op, c.endpoint, err)
}

// Version returns the runtime's name and version.
func (c *Client) Version(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		return nil, c.explain("CRI Version", err)
	}
	return resp, nil
}

// Status returns the runtime's conditions (RuntimeReady, NetworkReady),
// handlers and features.
func (c *Client) Status(ctx context.Context) (*runtimeapi.StatusResponse, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return nil, c.explain("CRI Status", err)
	}
	if resp.GetStatus() == nil {
		return nil, c.explain("CRI Status", errors.New("runtime returned no status"))
	}
	return resp, nil
}

// ListImages returns every image the runtime holds.
func (c *Client) ListImages(ctx context.Context) ([]*runtimeapi.Image, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, c.explain("CRI ListImages", err)
	}
	return resp.GetImages(), nil
}
