package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKubeadmConfigRotatesClientCertificate: the kubeadm config's
// rotateCertificates puts the agent's apiserver client under rotation.
// With the kubeconfig kubeadm writes on its first control-plane node
// (certificate data embedded), the pair is moved into the cert dir as
// kubelet-client-current.pem, as the kubelet does, for the manager to
// replace; every client then dials through the rotating transport.
func TestKubeadmConfigRotatesClientCertificate(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	certPEM, keyPEM := selfSignedClientPair(t, "system:node:node-1")
	writeFile(t, dir, "kubelet.conf", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1", certificate-authority-data: %s}
users:
- name: u
  user: {client-certificate-data: %s, client-key-data: %s}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, base64.StdEncoding.EncodeToString(certPEM), base64.StdEncoding.EncodeToString(certPEM), base64.StdEncoding.EncodeToString(keyPEM)))

	f := newFlags(newKlogFlags())
	args := append(baseArgs(t), "--config=testdata/kubeadm-config.yaml", "--kubeconfig="+kubeconfig, "--cert-dir="+filepath.Join(dir, "pki"))
	if _, err := f.parse(args); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := buildConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, err := newAPIServerIdentity(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if id.rotation == nil || id.rest.Transport == nil || len(id.rest.CertData) != 0 {
		t.Fatalf("client not under rotation: rotation %v transport %v", id.rotation != nil, id.rest.Transport != nil)
	}
	if _, err := os.Readlink(filepath.Join(dir, "pki", "kubelet-client-current.pem")); err != nil {
		t.Errorf("kubeadm's pair not moved into the cert dir: %v", err)
	}
	if cur := id.rotation.Current(); cur == nil || cur.Leaf.Subject.CommonName != "system:node:node-1" {
		t.Errorf("current certificate %v", cur)
	}
}

func selfSignedClientPair(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// TestBootstrapKubeconfigAloneIsAccepted: a node joining with a token has no kubeconfig yet;
// run writes it.
func TestBootstrapKubeconfigAloneIsAccepted(t *testing.T) {
	dir := t.TempDir()
	bootstrap := writeFile(t, dir, "bootstrap-kubelet.conf", "apiVersion: v1\nkind: Config\n")
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	f := newFlags(newKlogFlags())
	if _, err := f.parse(append(baseArgs(t), "--kubeconfig="+kubeconfig, "--bootstrap-kubeconfig="+bootstrap)); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := buildConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.kubeconfig != kubeconfig || cfg.bootstrapKubeconfig != bootstrap {
		t.Errorf("kubeconfig %q bootstrap %q", cfg.kubeconfig, cfg.bootstrapKubeconfig)
	}
}
