package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// maxRedirects is how many same-host redirects an HTTP probe follows.
const maxRedirects = 10

// newTransport builds the one transport every HTTP probe and hook shares.
// It keeps no connections alive (each probe dials afresh, so a probe never
// holds a socket of a pod that is gone), uses no proxy, accepts any
// certificate, as the kubelet's probes do, and closes sockets with a
// zero-time linger so thousands of probes leave no TIME_WAIT behind.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         probeDialer().DialContext,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes trust any certificate, as the kubelet's do
		DisableKeepAlives:   true,
		DisableCompression:  true,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: -1,
	}
}

// probeDialer dials with SO_LINGER set to one second, so closing a probe
// connection does not leave it in TIME_WAIT.
func probeDialer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 1})
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

// httpProbe GETs the probe's URL: 2xx is a success, 3xx a redirect that
// was not followed (to another host, or past maxRedirects) a success with
// a warning, anything else a failure.
func (c *checker) httpProbe(ctx context.Context, t Target, h *v1.HTTPGetAction, timeout time.Duration) (outcome, string, error) {
	req, err := c.newRequest(ctx, t, h, "kube-probe")
	if err != nil {
		return outcomeFailure, "", err
	}
	client := &http.Client{Transport: c.transport, Timeout: timeout, CheckRedirect: sameHostRedirects}
	resp, err := client.Do(req)
	if err != nil {
		return outcomeFailure, err.Error(), nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	if err != nil {
		return outcomeFailure, "", fmt.Errorf("read probe response: %w", err)
	}
	body := string(b)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return outcomeSuccess, body, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return outcomeWarning, "Probe terminated redirects, Response body: " + body, nil
	}
	return outcomeFailure, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode), nil
}

// sameHostRedirects follows redirects on the same host only: a probe must
// not be sent elsewhere by the pod it checks. The last response is then
// the probe's answer.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= maxRedirects {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// newRequest builds the GET of an httpGet handler. agent is "kube-probe"
// or "kube-lifecycle", the User-Agent's product, unless the handler sets
// its own; a "Host" header sets the request's host.
func (c *checker) newRequest(ctx context.Context, t Target, h *v1.HTTPGetAction, agent string) (*http.Request, error) {
	u, err := handlerURL(t, h)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("build probe request: %w", err)
	}
	for _, hd := range h.HTTPHeaders {
		req.Header.Add(hd.Name, hd.Value)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", agent+"/"+c.version)
	}
	if _, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	}
	if host := req.Header.Get("Host"); host != "" {
		req.Host = host
	}
	return req, nil
}

// handlerURL is the URL an httpGet handler names: its scheme (http by
// default), its host or the pod's IP, its port by number or by the name of
// one of the container's ports, and its path (which may carry a query).
func handlerURL(t Target, h *v1.HTTPGetAction) (*url.URL, error) {
	scheme := strings.ToLower(string(h.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := h.Host
	if host == "" {
		host = t.PodIP
	}
	if host == "" {
		return nil, errors.New("pod has no IP to probe")
	}
	port, err := resolvePort(h.Port, t.Container)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(h.Path)
	if err != nil {
		u = &url.URL{Path: h.Path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	return u, nil
}

// resolvePort turns a handler's port into a number: an integer, the name
// of a container port, or a number written as a string.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	port := p.IntValue()
	if p.Type == intstr.String {
		port = -1
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				port = int(cp.ContainerPort)
				break
			}
		}
		if port < 0 {
			n, err := strconv.Atoi(p.StrVal)
			if err != nil {
				return 0, fmt.Errorf("port %s not found", p.StrVal)
			}
			port = n
		}
	}
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("invalid port number: %d", port)
	}
	return port, nil
}
