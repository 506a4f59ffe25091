package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// isUpgradeRequest reports whether r asks to switch protocols (SPDY or
// WebSocket), the only way exec, attach and port-forward are spoken.
func isUpgradeRequest(r *http.Request) bool {
	if r.Header.Get("Upgrade") == "" {
		return false
	}
	for _, v := range r.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(textproto.TrimString(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// streamTransport reaches the runtime's streaming server, which listens on
// the node itself: never through an HTTP proxy from the environment.
var streamTransport = &http.Transport{
	DialContext:           (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
	ResponseHeaderTimeout: 30 * time.Second,
	MaxIdleConns:          1,
}

// relay passes the upgrade request to the runtime's stream URL and, once
// the runtime switches protocols, copies bytes both ways until either side
// closes, the stream idles too long or the server stops.
func (a *api) relay(w http.ResponseWriter, r *http.Request, location string) {
	target, err := url.Parse(location)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		writeError(w, r, errorf(http.StatusInternalServerError, "the runtime returned an unusable stream URL %q", location))
		return
	}
	logger := klog.FromContext(r.Context())
	proxy := &httputil.ReverseProxy{
		Transport: streamTransport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := *target
			if out.RawQuery == "" {
				out.RawQuery = pr.In.URL.RawQuery
			}
			pr.Out.URL = &out
			pr.Out.Host = target.Host
			// The caller's credentials are for this API, not the runtime.
			pr.Out.Header.Del("Authorization")
		},
		ModifyResponse: func(resp *http.Response) error {
			// A redirect on a stream request is never followed nor passed
			// on (CVE-2020-8559).
			if resp.StatusCode >= 300 && resp.StatusCode < 400 {
				return fmt.Errorf("runtime stream server answered with redirect %d", resp.StatusCode)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			logger.Error(err, "Relaying stream to the runtime failed", "path", r.URL.Path)
			http.Error(w, "relaying the stream to the container runtime failed: "+err.Error(), http.StatusBadGateway)
		},
	}
	proxy.ServeHTTP(&idleResponseWriter{ResponseWriter: w, timeout: a.idleTimeout, ctx: r.Context()}, r)
}

// idleResponseWriter hands out a hijacked connection that is closed after
// timeout without traffic either way, or when ctx ends.
type idleResponseWriter struct {
	http.ResponseWriter
	timeout time.Duration
	ctx     context.Context
}

func (w *idleResponseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	ic := newIdleConn(w.ctx, conn, w.timeout)
	return ic, brw, nil
}

func (w *idleResponseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// idleConn tracks the last read or write and closes the connection once
// it has been idle for timeout (0: never) or ctx is done.
type idleConn struct {
	net.Conn
	last    atomic.Int64 // unix nanoseconds
	done    chan struct{}
	closeMu sync.Once
}

func newIdleConn(ctx context.Context, conn net.Conn, timeout time.Duration) *idleConn {
	c := &idleConn{Conn: conn, done: make(chan struct{})}
	c.touch()
	go c.watch(ctx, timeout)
	return c
}

func (c *idleConn) touch() { c.last.Store(time.Now().UnixNano()) }

func (c *idleConn) watch(ctx context.Context, timeout time.Duration) {
	var tick <-chan time.Time
	if timeout > 0 {
		t := time.NewTicker(max(timeout/4, 10*time.Millisecond))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.done:
			return
		case <-ctx.Done():
			_ = c.Close()
			return
		case <-tick:
			if time.Since(time.Unix(0, c.last.Load())) >= timeout {
				klog.FromContext(ctx).V(2).Info("Closing idle stream", "idleTimeout", timeout)
				_ = c.Close()
				return
			}
		}
	}
}

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *idleConn) Close() error {
	err := net.ErrClosed
	c.closeMu.Do(func() {
		close(c.done)
		err = c.Conn.Close()
	})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
