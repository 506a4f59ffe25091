package certs

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

func bootstrapConfig(t *testing.T, dir string, client kubernetes.Interface) BootstrapConfig {
	return BootstrapConfig{
		Kubeconfig:          filepath.Join(dir, "kubelet.conf"),
		BootstrapKubeconfig: writeBootstrapKubeconfig(t, dir, "https://127.0.0.1:6443", newTestCA(t).pem),
		CertDir:             filepath.Join(dir, "pki"),
		NodeName:            "node-1",
		Timeout:             10 * time.Second,
		NewClient:           func(*rest.Config) (kube.Interface, error) { return kubetest.Wrap(client), nil },
	}
}

func TestBootstrapRequestsStoresAndWritesKubeconfig(t *testing.T) {
	dir := t.TempDir()
	client, s := newSignerClient(t, newTestCA(t), time.Hour)
	cfg := bootstrapConfig(t, dir, client)

	did, err := Bootstrap(context.Background(), cfg)
	if err != nil || !did {
		t.Fatalf("Bootstrap = %v, %v", did, err)
	}
	sent := s.sent()
	if len(sent) != 1 {
		t.Fatalf("%d CSRs sent, want 1", len(sent))
	}
	csr := sent[0]
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		t.Errorf("signer %q", csr.Spec.SignerName)
	}
	// An ECDSA key, as the kubelet's: no key encipherment.
	wantUsages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	if !slices.Equal(csr.Spec.Usages, wantUsages) {
		t.Errorf("usages %v, want %v", csr.Spec.Usages, wantUsages)
	}
	if !strings.HasPrefix(csr.Name, "node-csr-") {
		t.Errorf("CSR name %q", csr.Name)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if req.Subject.CommonName != "system:node:node-1" || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject %v", req.Subject)
	}

	current := filepath.Join(cfg.CertDir, "kubelet-client-current.pem")
	target, err := os.Readlink(current)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^kubelet-client-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}\.pem$`).MatchString(filepath.Base(target)) {
		t.Errorf("current.pem -> %s", target)
	}
	if st, err := os.Stat(current); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("pem mode %v, %v", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(cfg.CertDir, bootstrapKeyFile)); !os.IsNotExist(err) {
		t.Errorf("bootstrap key left behind: %v", err)
	}
	if st, err := os.Stat(cfg.Kubeconfig); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, %v", st.Mode(), err)
	}
	kc, err := clientcmd.LoadFromFile(cfg.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	auth := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	cluster := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
	if auth.ClientCertificate != current || auth.ClientKey != current {
		t.Errorf("kubeconfig user %+v, want both files %s", auth, current)
	}
	if cluster.Server != "https://127.0.0.1:6443" || cluster.CertificateAuthority != filepath.Join(dir, "ca.crt") {
		t.Errorf("kubeconfig cluster %+v", cluster)
	}
	if err := KubeconfigProblem(cfg.Kubeconfig, time.Now()); err != nil {
		t.Errorf("written kubeconfig unusable: %v", err)
	}

	// A usable kubeconfig is left alone.
	if did, err := Bootstrap(context.Background(), cfg); err != nil || did {
		t.Errorf("second Bootstrap = %v, %v", did, err)
	}
	if n := len(s.sent()); n != 1 {
		t.Errorf("%d CSRs after the second Bootstrap", n)
	}
}

func TestBootstrapReplacesAnExpiredCertificate(t *testing.T) {
	dir := t.TempDir()
	client, s := newSignerClient(t, newTestCA(t), time.Second)
	cfg := bootstrapConfig(t, dir, client)
	if _, err := Bootstrap(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := KubeconfigProblem(cfg.Kubeconfig, time.Now()); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("problem = %v, want expired", err)
	}
	s.life = time.Hour
	did, err := Bootstrap(context.Background(), cfg)
	if err != nil || !did {
		t.Fatalf("Bootstrap after expiry = %v, %v", did, err)
	}
	sent := s.sent()
	if len(sent) != 2 {
		t.Fatalf("%d CSRs", len(sent))
	}
	// A new key: the old key's CSR, issued and expired, still exists.
	if sent[0].Name == sent[1].Name {
		t.Errorf("expired key reused: CSR %s twice", sent[0].Name)
	}
	if err := KubeconfigProblem(cfg.Kubeconfig, time.Now()); err != nil {
		t.Errorf("after re-bootstrap: %v", err)
	}
}

func TestKubeconfigProblem(t *testing.T) {
	dir := t.TempDir()
	client, _ := newSignerClient(t, newTestCA(t), time.Hour)
	cfg := bootstrapConfig(t, dir, client)
	if _, err := Bootstrap(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(cfg.Kubeconfig)
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not a pem"), 0o600)
	tests := []struct {
		name, path string
		now        time.Time
		want       string
	}{
		{name: "valid", path: cfg.Kubeconfig, now: time.Now()},
		{name: "token only", path: cfg.BootstrapKubeconfig, now: time.Now()},
		{name: "missing", path: filepath.Join(dir, "nope.conf"), now: time.Now(), want: "does not exist"},
		{name: "not yaml", path: write("bad.conf", "{{{"), now: time.Now(), want: "unreadable"},
		{name: "expired", path: cfg.Kubeconfig, now: time.Now().Add(2 * time.Hour), want: "expired"},
		{name: "unreadable certificate", path: write("garbage.conf", strings.ReplaceAll(string(good), filepath.Join(cfg.CertDir, "kubelet-client-current.pem"), garbage)), now: time.Now(), want: "unusable"},
		{name: "missing certificate file", path: write("gone.conf", strings.ReplaceAll(string(good), filepath.Join(cfg.CertDir, "kubelet-client-current.pem"), "/nonexistent.pem")), now: time.Now(), want: "/nonexistent.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := KubeconfigProblem(tt.path, tt.now)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("KubeconfigProblem = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestBootstrapGivesUpAtTheTimeout(t *testing.T) {
	dir := t.TempDir()
	// A certificates API where nobody approves anything.
	cfg := bootstrapConfig(t, dir, fake.NewClientset())
	cfg.Timeout = 300 * time.Millisecond
	if _, err := Bootstrap(context.Background(), cfg); err == nil {
		t.Fatal("Bootstrap succeeded without an approval")
	}
	// Kept for the next attempt, whose CSR then has the same name.
	if _, err := os.Stat(filepath.Join(cfg.CertDir, bootstrapKeyFile)); err != nil {
		t.Errorf("the key of the pending request is not kept: %v", err)
	}
	if _, err := os.Stat(cfg.Kubeconfig); !os.IsNotExist(err) {
		t.Errorf("kubeconfig written without a certificate: %v", err)
	}
}
