package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/pkg/atomicfile"
)

// swappableCert is a CertificateSource a test changes at will.
type swappableCert struct {
	cur atomic.Pointer[tls.Certificate]
}

func (s *swappableCert) Current() *tls.Certificate { return s.cur.Load() }

// TestServingCertificateAndClientCAChangeWithoutRestart: the listener
// takes its certificate from the source at each handshake (nothing
// before one is issued), and a client CA file rewritten on disk admits
// clients of the new CA, whose certificates a Go client only sends when
// the handshake names their CA.
func TestServingCertificateAndClientCAChangeWithoutRestart(t *testing.T) {
	ca, other := newTestCA(t, "cluster-ca"), newTestCA(t, "other-ca")
	serving := func() tls.Certificate {
		pair := ca.issue(t, "system:node:node-1", nil, func(c *x509.Certificate) {
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			c.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		})
		pair.Leaf, _ = x509.ParseCertificate(pair.Certificate[0])
		return pair
	}
	source := &swappableCert{}
	caFile := writeTemp(t, "ca.crt", ca.pem)
	cfg := baseConfig(t)
	cfg.ServingCertificate = source
	cfg.ClientCAFile = caFile
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	servedSerial := func() (string, error) {
		conn, err := tls.Dial("tcp", s.Addr(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			return "", err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	if _, err := servedSerial(); err == nil {
		t.Fatal("handshake succeeded before a serving certificate exists")
	}
	first := serving()
	source.cur.Store(&first)
	if got, err := servedSerial(); err != nil || got != first.Leaf.SerialNumber.String() {
		t.Fatalf("served %s, %v; want %s", got, err, first.Leaf.SerialNumber)
	}
	second := serving()
	source.cur.Store(&second)
	if got, err := servedSerial(); err != nil || got != second.Leaf.SerialNumber.String() {
		t.Fatalf("after the swap served %s, %v; want %s", got, err, second.Leaf.SerialNumber)
	}

	user := other.issue(t, "carol", nil, nil)
	status := func() int {
		tc := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{user}}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}, Timeout: 5 * time.Second}
		resp, err := c.Get("https://" + s.Addr() + "/pods")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := status(); code != http.StatusUnauthorized {
		t.Fatalf("a client of an untrusted CA got %d", code)
	}
	if err := os.WriteFile(caFile, append(append([]byte{}, ca.pem...), other.pem...), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for status() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the rewritten client CA file was not picked up within 15s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestServingCertificateFilesReloaded: tlsCertFile and tlsPrivateKeyFile
// rewritten on disk (as cert-manager or an operator's rotation does) are
// served from the next handshakes on, without a restart.
func TestServingCertificateFilesReloaded(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func() *big.Int {
		pair := ca.issue(t, "node-1", nil, func(c *x509.Certificate) {
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			c.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		})
		keyDER, err := x509.MarshalECPrivateKey(pair.PrivateKey.(*ecdsa.PrivateKey))
		if err != nil {
			t.Fatal(err)
		}
		// Key first, then certificate, each replaced whole, as tools do.
		if err := atomicfile.Write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := atomicfile.Write(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pair.Certificate[0]}), 0o644); err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		return leaf.SerialNumber
	}
	first := write()
	cfg := baseConfig(t)
	cfg.TLSCertFile, cfg.TLSPrivateKeyFile = certFile, keyFile
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, s)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	served := func() *big.Int {
		conn, err := tls.Dial("tcp", s.Addr(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if got := served(); got.Cmp(first) != 0 {
		t.Fatalf("served serial %s, want %s", got, first)
	}
	second := write()
	deadline := time.Now().Add(15 * time.Second)
	for served().Cmp(second) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the rewritten serving certificate files were not picked up within 15s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
