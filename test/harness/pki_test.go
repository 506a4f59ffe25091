package harness

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readCert parses the first certificate of a PEM file.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cert
}

// verifies says whether cert chains to the CA certificate at caPath for usage.
func verifies(t *testing.T, cert *x509.Certificate, caPath string, usage x509.ExtKeyUsage) bool {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, caPath))
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err == nil
}

// argValue is the value of --name=value in args, and whether it is there.
func argValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// pkiConfig is a two-node Config whose run dir is a fresh temporary directory.
func pkiConfig(t *testing.T) *Config {
	return &Config{RepoDir: "../..", RunDir: t.TempDir(), NodeCount: 2}
}

// TestWritePKIFrontProxy: the front-proxy client certificate is issued by the front-proxy
// CA alone, for client auth, with kubeadm's CN, and its key is its own; the two CAs trust
// none of each other's certificates.
func TestWritePKIFrontProxy(t *testing.T) {
	c := pkiConfig(t)
	if err := c.writePKI(); err != nil {
		t.Fatal(err)
	}
	pki := func(f string) string { return c.path("pki", f) }
	client := readCert(t, pki("front-proxy-client.crt"))
	if client.Subject.CommonName != "front-proxy-client" {
		t.Errorf("front-proxy-client CN %q, want front-proxy-client", client.Subject.CommonName)
	}
	if ca := readCert(t, pki("front-proxy-ca.crt")); !ca.IsCA || ca.Subject.CommonName != "front-proxy-ca" {
		t.Errorf("front-proxy-ca: IsCA %v, CN %q", ca.IsCA, ca.Subject.CommonName)
	}
	if _, err := tls.LoadX509KeyPair(pki("front-proxy-client.crt"), pki("front-proxy-client.key")); err != nil {
		t.Errorf("front-proxy-client key pair: %v", err)
	}
	tests := []struct {
		name  string
		cert  string
		ca    string
		usage x509.ExtKeyUsage
		want  bool
	}{
		{name: "front-proxy client by its CA", cert: "front-proxy-client.crt", ca: "front-proxy-ca.crt", usage: x509.ExtKeyUsageClientAuth, want: true},
		{name: "front-proxy client is no server", cert: "front-proxy-client.crt", ca: "front-proxy-ca.crt", usage: x509.ExtKeyUsageServerAuth, want: false},
		{name: "front-proxy client not by the cluster CA", cert: "front-proxy-client.crt", ca: "ca.crt", usage: x509.ExtKeyUsageClientAuth, want: false},
		{name: "admin not by the front-proxy CA", cert: "admin.crt", ca: "front-proxy-ca.crt", usage: x509.ExtKeyUsageClientAuth, want: false},
		{name: "admin by the cluster CA", cert: "admin.crt", ca: "ca.crt", usage: x509.ExtKeyUsageClientAuth, want: true},
		{name: "apiserver by the cluster CA", cert: "apiserver.crt", ca: "ca.crt", usage: x509.ExtKeyUsageServerAuth, want: true},
		{name: "second node by the cluster CA", cert: "node-node2.crt", ca: "ca.crt", usage: x509.ExtKeyUsageClientAuth, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verifies(t, readCert(t, pki(tt.cert)), pki(tt.ca), tt.usage); got != tt.want {
				t.Errorf("%s verifies against %s: %v, want %v", tt.cert, tt.ca, got, tt.want)
			}
		})
	}
}

// TestWritePKIOverPartialRun: writePKI over the pki/ of a run cut short (a truncated CA
// key, a half-written certificate, files missing) and then again leaves whole key pairs,
// each certificate issued by the CA now on disk.
func TestWritePKIOverPartialRun(t *testing.T) {
	c := pkiConfig(t)
	dir := c.path("pki")
	if err := writeFiles(dir, map[string]string{
		"front-proxy-ca.key":     "",
		"front-proxy-client.crt": "-----BEGIN CERTIFICATE-----\nMIIB",
		"ca.crt":                 "garbage",
	}); err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ {
		if err := c.writePKI(); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		for _, pair := range []string{"ca", "front-proxy-ca", "front-proxy-client", "apiserver", "admin"} {
			if _, err := tls.LoadX509KeyPair(filepath.Join(dir, pair+".crt"), filepath.Join(dir, pair+".key")); err != nil {
				t.Errorf("run %d: %s key pair: %v", run, pair, err)
			}
		}
		if !verifies(t, readCert(t, filepath.Join(dir, "front-proxy-client.crt")), filepath.Join(dir, "front-proxy-ca.crt"), x509.ExtKeyUsageClientAuth) {
			t.Errorf("run %d: front-proxy-client is not issued by the front-proxy CA on disk", run)
		}
	}
}

// TestControlPlaneFrontProxyArgs: the apiserver has kubeadm's front-proxy flags, its
// requestheader CA is the one that issued its proxy client certificate, whose CN it
// allows; it routes to APIServices by ClusterIP as kubeadm's does; the controller-manager
// trusts the same requestheader CA.
func TestControlPlaneFrontProxyArgs(t *testing.T) {
	c := pkiConfig(t)
	if err := c.writePKI(); err != nil {
		t.Fatal(err)
	}
	api := c.apiServerArgs()
	for name, want := range map[string]string{
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-client-ca-file":       c.path("pki", "front-proxy-ca.crt"),
		"proxy-client-cert-file":             c.path("pki", "front-proxy-client.crt"),
		"proxy-client-key-file":              c.path("pki", "front-proxy-client.key"),
	} {
		if got, _ := argValue(api, name); got != want {
			t.Errorf("kube-apiserver --%s=%q, want %q", name, got, want)
		}
	}
	if v, ok := argValue(api, "enable-aggregator-routing"); ok {
		t.Errorf("kube-apiserver --enable-aggregator-routing=%s, want it unset as kubeadm has it", v)
	}
	caFile, _ := argValue(api, "requestheader-client-ca-file")
	certFile, _ := argValue(api, "proxy-client-cert-file")
	keyFile, _ := argValue(api, "proxy-client-key-file")
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Errorf("proxy client key pair: %v", err)
	}
	proxyCert := readCert(t, certFile)
	if !verifies(t, proxyCert, caFile, x509.ExtKeyUsageClientAuth) {
		t.Errorf("the proxy client certificate does not verify against --requestheader-client-ca-file")
	}
	if allowed, _ := argValue(api, "requestheader-allowed-names"); !slices.Contains(strings.Split(allowed, ","), proxyCert.Subject.CommonName) {
		t.Errorf("--requestheader-allowed-names=%s does not allow the proxy client's CN %q", allowed, proxyCert.Subject.CommonName)
	}
	for _, flag := range []string{"client-ca-file", "tls-cert-file", "tls-private-key-file", "kubelet-client-certificate", "kubelet-client-key", "service-account-key-file", "service-account-signing-key-file"} {
		if f, _ := argValue(api, flag); f == "" {
			t.Errorf("kube-apiserver has no --%s", flag)
		} else if _, err := os.Stat(f); err != nil {
			t.Errorf("kube-apiserver --%s: %v", flag, err)
		}
	}
	if got, _ := argValue(c.controllerManagerArgs(), "requestheader-client-ca-file"); got != caFile {
		t.Errorf("kube-controller-manager --requestheader-client-ca-file=%q, want the apiserver's %q", got, caFile)
	}
}
