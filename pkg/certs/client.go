package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// Defaults of ClientConfig.
const (
	defaultCheckInterval = 10 * time.Second
	// defaultExitAfter is how long the agent goes on without a valid client
	// certificate while the apiserver answers, the kubelet's five minutes:
	// after that only a restart (and the bootstrap kubeconfig) can help.
	defaultExitAfter = 5 * time.Minute
)

// ClientConfig configures the rotating client certificate.
type ClientConfig struct {
	// Kubeconfig is the node's kubeconfig, usable (see Bootstrap): its
	// server, CA and client certificate. Required.
	Kubeconfig string
	// BootstrapKubeconfig holds the credentials a CSR is sent with while
	// the node has no valid certificate; empty means the node's own.
	BootstrapKubeconfig string
	// CertDir is where new pairs are written. Required.
	CertDir string
	// NodeName is the node the certificate is for. Required.
	NodeName string
	// CheckInterval is how often connections are checked against the
	// current certificate; 0 means 10s.
	CheckInterval time.Duration
	// ExitAfter is how long Run tolerates having no valid certificate
	// while the apiserver answers before it fails; 0 means 5m.
	ExitAfter time.Duration
	// NewClient builds the client CSRs are sent with; nil means
	// kube.NewForConfig. Tests give a fake.
	NewClient func(*rest.Config) (kube.Interface, error)
}

// Client is the node's apiserver client identity under rotation: a
// rotator (rotation.go) that renews the certificate at a random point
// between 70 and 90 % of its life through a new CSR, and a transport
// that presents whatever certificate is current and drops its
// connections when it changes, so every client built from RESTConfig
// (informers, the Lease, status writes) moves to the new certificate
// without a restart.
type Client struct {
	cfg     ClientConfig
	rotator *rotator
	dialer  *connrotation.Dialer
	rest    *rest.Config
}

// NewClient loads the kubeconfig and the current certificate and builds
// the rotator; nothing is sent until Run.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	switch {
	case cfg.Kubeconfig == "":
		return nil, errors.New("certs: a kubeconfig path is required")
	case cfg.CertDir == "":
		return nil, errors.New("certs: a cert dir is required")
	case cfg.NodeName == "":
		return nil, errors.New("certs: a node name is required")
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = defaultCheckInterval
	}
	if cfg.ExitAfter == 0 {
		cfg.ExitAfter = defaultExitAfter
	}
	if cfg.NewClient == nil {
		cfg.NewClient = newKubeClient
	}
	nodeCfg, err := loadRESTConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", cfg.Kubeconfig, err)
	}
	// The bootstrap kubeconfig may be gone, as the kubelet allows: kubeadm
	// writes none on its first control-plane node and removes it after a
	// join. The node then renews with its own certificate only.
	csrCfg := nodeCfg
	if cfg.BootstrapKubeconfig != "" {
		if _, err := os.Stat(cfg.BootstrapKubeconfig); err == nil {
			if csrCfg, err = loadRESTConfig(cfg.BootstrapKubeconfig); err != nil {
				return nil, fmt.Errorf("load bootstrap kubeconfig %s: %w", cfg.BootstrapKubeconfig, err)
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("bootstrap kubeconfig: %w", err)
		}
	}
	c := &Client{cfg: cfg}
	c.dialer = connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	if c.rest, err = c.rotatingConfig(nodeCfg); err != nil {
		return nil, err
	}
	// A kubeconfig whose files are the store's current pair (a
	// bootstrapped one) is the store itself; other files are read while
	// the store has no pair and renewed like one; embedded data (kubeadm's
	// first control-plane kubeconfig) seeds the store, and the rotator
	// replaces it with a certificate of its own at once.
	c.rotator, err = newRotator(klog.FromContext(ctx), rotatorConfig{
		Name:  "client",
		Store: newPairStore(cfg.CertDir, clientPrefix, nodeCfg.CertFile, nodeCfg.KeyFile),
		Client: func(current *tls.Certificate) (kube.Interface, error) {
			// With a valid certificate the node renews as itself (the
			// selfnodeclient approval); without one, with the bootstrap
			// credentials.
			if current != nil {
				return cfg.NewClient(c.rest)
			}
			return cfg.NewClient(csrCfg)
		},
		Template:    func() *x509.CertificateRequest { return &x509.CertificateRequest{Subject: nodeSubject(cfg.NodeName)} },
		SignerName:  certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages:      ClientUsages,
		SeedCertPEM: nodeCfg.CertData,
		SeedKeyPEM:  nodeCfg.KeyData,
	})
	if err != nil {
		return nil, fmt.Errorf("client certificate rotation: %w", err)
	}
	return c, nil
}

// rotatingConfig is nodeCfg without its client certificate: the
// transport asks the rotator for the current one at every handshake and
// dials through c.dialer, whose connections Run closes on a change.
func (c *Client) rotatingConfig(nodeCfg *rest.Config) (*rest.Config, error) {
	tlsCfg, err := rest.TLSConfigFor(nodeCfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig TLS settings: %w", err)
	}
	if tlsCfg == nil {
		return nil, errors.New("kubeconfig: certificate rotation needs an https server")
	}
	tlsCfg.Certificates = nil
	tlsCfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cur := c.rotator.Current(); cur != nil {
			return cur, nil
		}
		// No certificate: the server decides what an anonymous client gets.
		return &tls.Certificate{}, nil
	}
	out := rest.AnonymousClientConfig(nodeCfg)
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsCfg,
		MaxIdleConnsPerHost: 25,
		DialContext:         c.dialer.DialContext,
	})
	return out, nil
}

// RESTConfig is the configuration every apiserver client of the agent is
// built from; the caller may set its user agent, rate limits and content
// type on the copy it gets.
func (c *Client) RESTConfig() *rest.Config { return rest.CopyConfig(c.rest) }

// Current is the certificate in use, nil when it expired or there is none.
func (c *Client) Current() *tls.Certificate { return c.rotator.Current() }

// Run rotates the certificate until ctx ends. It fails when the node has
// had no valid certificate for ExitAfter while the apiserver answered:
// a restart bootstraps again from the bootstrap kubeconfig.
func (c *Client) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.rotator.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	w := &rotationWatch{last: c.rotator.Current(), lastValid: time.Now()}
	ticker := time.NewTicker(c.cfg.CheckInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		switch w.observe(c.rotator.Current(), time.Now(), c.cfg.ExitAfter, c.rotator.ServerHealthy()) {
		case rotationSwitch:
			logger.Info("Client certificate rotated; closing apiserver connections to use it")
			c.dialer.CloseAll()
		case rotationGiveUp:
			return fmt.Errorf("no valid client certificate since %s and the apiserver answers: restart to bootstrap again", w.lastValid.UTC().Format(time.RFC3339))
		}
	}
}

// rotationAction is what Run does after a look at the current certificate.
type rotationAction int

const (
	rotationNothing rotationAction = iota
	rotationSwitch                 // a new certificate: close the connections
	rotationGiveUp                 // none for too long: fail
)

// rotationWatch remembers the certificate connections were made with and
// when a valid one was last seen.
type rotationWatch struct {
	last      *tls.Certificate
	lastValid time.Time
}

// observe decides what a look at the current certificate cur means.
func (w *rotationWatch) observe(cur *tls.Certificate, now time.Time, exitAfter time.Duration, serverHealthy bool) rotationAction {
	if cur == nil {
		if now.Sub(w.lastValid) > exitAfter && serverHealthy {
			return rotationGiveUp
		}
		return rotationNothing
	}
	w.lastValid = now
	if cur == w.last {
		return rotationNothing
	}
	w.last = cur
	return rotationSwitch
}
