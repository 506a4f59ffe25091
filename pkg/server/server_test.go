package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// baseConfig is a valid Config on a free port; tests mutate a copy.
func baseConfig(t *testing.T) Config {
	return Config{
		Address:           "127.0.0.1",
		Port:              -1,
		NodeName:          "node-1",
		NodeIPs:           []net.IP{net.ParseIP("10.0.0.5")},
		CertDir:           t.TempDir(),
		AuthorizationMode: AuthorizationModeAlwaysAllow,
		Runtime:           &fakeRuntime{},
		Pods:              func() []*v1.Pod { return []*v1.Pod{testPod()} },
	}
}

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "valid"},
		{name: "no node name", mutate: func(c *Config) { c.NodeName = "" }, wantErr: "node name"},
		{name: "hostname address", mutate: func(c *Config) { c.Address = "localhost" }, wantErr: "not an IP"},
		{name: "port out of range", mutate: func(c *Config) { c.Port = 70000 }, wantErr: "out of range"},
		{name: "no runtime", mutate: func(c *Config) { c.Runtime = nil }, wantErr: "CRI"},
		{name: "no pods", mutate: func(c *Config) { c.Pods = nil }, wantErr: "pod lister"},
		{name: "bad mode", mutate: func(c *Config) { c.AuthorizationMode = "RBAC" }, wantErr: "authorization mode"},
		{name: "webhook without client", mutate: func(c *Config) { c.WebhookAuthenticationEnabled = true }, wantErr: "apiserver client"},
		{name: "bad TLS version", mutate: func(c *Config) { c.TLSMinVersion = "TLS1.2" }, wantErr: "tlsMinVersion"},
		{name: "unknown cipher", mutate: func(c *Config) { c.TLSCipherSuites = []string{"TLS_FAST"} }, wantErr: "TLS_FAST"},
		{name: "ciphers with TLS 1.3", mutate: func(c *Config) {
			c.TLSMinVersion = "VersionTLS13"
			c.TLSCipherSuites = []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}
		}, wantErr: "VersionTLS13"},
		{name: "cert without key", mutate: func(c *Config) { c.TLSCertFile = "/x.crt" }, wantErr: "together"},
		{name: "missing cert files", mutate: func(c *Config) { c.TLSCertFile, c.TLSPrivateKeyFile = "/nope.crt", "/nope.key" }, wantErr: "serving certificate"},
		{name: "missing client CA", mutate: func(c *Config) { c.ClientCAFile = "/nope/ca.crt" }, wantErr: "clientCAFile"},
		{name: "negative idle timeout", mutate: func(c *Config) { c.StreamingConnectionIdleTimeout = -time.Second }, wantErr: "streamingConnectionIdleTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := baseConfig(t)
			if tt.mutate != nil {
				tt.mutate(&cfg)
			}
			s, err := New(cfg)
			if s != nil {
				s.listener.Close()
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("New = %v, want error with %q", err, tt.wantErr)
			}
		})
	}
}

func TestTLSSettings(t *testing.T) {
	cfg := baseConfig(t)
	cfg.TLSMinVersion = "VersionTLS12"
	cfg.TLSCipherSuites = []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"}
	tc, _, err := servingTLSConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tc.MinVersion != tls.VersionTLS12 || len(tc.CipherSuites) != 2 || tc.CipherSuites[0] != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 {
		t.Errorf("tls config: min %x suites %v", tc.MinVersion, tc.CipherSuites)
	}
}

func TestSelfSignedCertIsKeptInCertDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	now := time.Now()
	certFile, keyFile, err := ensureSelfSignedCert(dir, "node-1", []net.IP{net.ParseIP("10.0.0.5")}, now)
	if err != nil {
		t.Fatal(err)
	}
	if certFile != filepath.Join(dir, "kubelet.crt") || keyFile != filepath.Join(dir, "kubelet.key") {
		t.Errorf("files %s %s", certFile, keyFile)
	}
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v %v", st.Mode(), err)
	}
	data, _ := os.ReadFile(certFile)
	block, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("node-1"); err != nil {
		t.Error(err)
	}
	if err := cert.VerifyHostname("10.0.0.5"); err != nil {
		t.Error(err)
	}
	if _, _, err := ensureSelfSignedCert(dir, "node-1", nil, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(certFile)
	if !bytes.Equal(data, again) {
		t.Error("an existing self-signed certificate was replaced")
	}
}

// TestServeOverTLS runs the whole server: TLS, client certificates and
// tokens, Webhook authorization, and a clean stop.
func TestServeOverTLS(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	var sars atomic.Int32
	client := sarClient(&sars, func(s authzv1.SubjectAccessReviewSpec) bool {
		return s.User == "kube-apiserver-kubelet-client" || s.User == "carol" && s.ResourceAttributes.Subresource == "pods"
	})
	client.PrependReactor("create", "tokenreviews", tokenReactor(nil, map[string]string{"carol-token": "carol"}))
	cfg := baseConfig(t)
	cfg.ClientCAFile = writeTemp(t, "ca.crt", ca.pem)
	cfg.WebhookAuthenticationEnabled = true
	cfg.AuthorizationMode = AuthorizationModeWebhook
	cfg.Client = kubetest.Wrap(client)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	serving, err := os.ReadFile(filepath.Join(cfg.CertDir, "kubelet.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(serving)
	clientFor := func(cert *tls.Certificate) *http.Client {
		tc := &tls.Config{RootCAs: roots, ServerName: "node-1"}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	}
	apiserver := ca.issue(t, "kube-apiserver-kubelet-client", []string{"kubeadm:cluster-admins"}, nil)
	tests := []struct {
		name   string
		cert   *tls.Certificate
		token  string
		target string
		code   int
	}{
		{name: "apiserver certificate", cert: &apiserver, target: "/pods", code: 200},
		{name: "apiserver healthz", cert: &apiserver, target: "/healthz", code: 200},
		{name: "no credentials", target: "/pods", code: 401},
		{name: "token with nodes/pods", token: "carol-token", target: "/pods", code: 200},
		{name: "token without nodes/proxy", token: "carol-token", target: "/containerLogs/default/web/app", code: 403},
		{name: "unknown token", token: "nope", target: "/pods", code: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "https://"+s.Addr()+tt.target, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := clientFor(tt.cert).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Errorf("GET %s = %d %q, want %d", tt.target, resp.StatusCode, body, tt.code)
			}
		})
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}
