package certs

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// TestClientRotationMovesConnections runs the rotating client against a
// TLS server that requires client certificates and answers with the
// serial of the one it got: with certificates issued for a few seconds,
// the manager renews them and the same client presents each new one
// without being rebuilt.
func TestClientRotationMovesConnections(t *testing.T) {
	ca := newTestCA(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.TLS.PeerCertificates[0].SerialNumber.String())
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert, Certificates: []tls.Certificate{servingPair(t, ca, time.Hour)}}
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	csrClient, signer := newSignerClient(t, ca, 3*time.Second)
	bc := bootstrapConfig(t, dir, csrClient)
	bc.BootstrapKubeconfig = writeBootstrapKubeconfig(t, dir, srv.URL, ca.pem)
	if _, err := Bootstrap(context.Background(), bc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := NewClient(ctx, ClientConfig{
		Kubeconfig:          bc.Kubeconfig,
		BootstrapKubeconfig: bc.BootstrapKubeconfig,
		CertDir:             bc.CertDir,
		NodeName:            "node-1",
		CheckInterval:       50 * time.Millisecond,
		NewClient:           func(*rest.Config) (kube.Interface, error) { return kubetest.Wrap(csrClient), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	httpClient, err := rest.HTTPClientFor(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		resp, err := httpClient.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	first := serial()
	if first != c.Current().Leaf.SerialNumber.String() {
		t.Fatalf("server saw %s, manager holds %s", first, c.Current().Leaf.SerialNumber)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	// Two rotations: each new certificate reaches the server on the
	// connections of the same client.
	seen := map[string]bool{first: true}
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < 3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		seen[serial()] = true
	}
	if len(seen) < 3 {
		t.Fatalf("server saw certificates %v in 20s, want 3 (CSRs sent: %d)", seen, len(signer.sent()))
	}
	target, _ := os.Readlink(filepath.Join(bc.CertDir, "kubelet-client-current.pem"))
	if target == "" {
		t.Error("no current.pem symlink after rotation")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Run did not return")
	}
}

func TestRotationWatch(t *testing.T) {
	t0 := time.Now()
	a, b := &tls.Certificate{}, &tls.Certificate{}
	tests := []struct {
		name    string
		cur     *tls.Certificate
		at      time.Duration
		healthy bool
		want    rotationAction
	}{
		{name: "same certificate", cur: a, at: time.Minute, want: rotationNothing},
		{name: "new certificate", cur: b, at: time.Minute, want: rotationSwitch},
		{name: "none, briefly", cur: nil, at: time.Minute, healthy: true, want: rotationNothing},
		{name: "none for long, apiserver down", cur: nil, at: 10 * time.Minute, want: rotationNothing},
		{name: "none for long, apiserver up", cur: nil, at: 10 * time.Minute, healthy: true, want: rotationGiveUp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &rotationWatch{last: a, lastValid: t0}
			if got := w.observe(tt.cur, t0.Add(tt.at), 5*time.Minute, tt.healthy); got != tt.want {
				t.Errorf("observe = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestClientWithoutBootstrapKubeconfig: a bootstrap kubeconfig named but absent (kubeadm
// writes none on its first control-plane node and removes it after a join) is no error
// while the kubeconfig holds a certificate: the client starts on it.
func TestClientWithoutBootstrapKubeconfig(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	csrClient, _ := newSignerClient(t, ca, time.Hour)
	bc := bootstrapConfig(t, dir, csrClient)
	bc.BootstrapKubeconfig = writeBootstrapKubeconfig(t, dir, "https://127.0.0.1:1", ca.pem)
	if _, err := Bootstrap(context.Background(), bc); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(bc.BootstrapKubeconfig); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(context.Background(), ClientConfig{
		Kubeconfig:          bc.Kubeconfig,
		BootstrapKubeconfig: bc.BootstrapKubeconfig,
		CertDir:             bc.CertDir,
		NodeName:            "node-1",
		NewClient:           func(*rest.Config) (kube.Interface, error) { return kubetest.Wrap(csrClient), nil },
	})
	if err != nil {
		t.Fatalf("NewClient with the bootstrap kubeconfig gone: %v", err)
	}
	if c.Current() == nil {
		t.Error("no current certificate from the kubeconfig")
	}
}
