//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// TestNodeAPIReloadsFromDisk is not parallel: the agent is restarted with files of the
// test's as its serving certificate (tlsCertFile, tlsPrivateKeyFile) and client CA
// (authentication.x509.clientCAFile), and a 5 s streamingConnectionIdleTimeout. Each file
// rewritten on disk is taken up by the running agent: a client certificate of the cluster's
// CA is refused while the file names another CA and accepted once it names the cluster's;
// the serving certificate presented changes with its file. A port-forward stream opened on
// the node API and left idle is closed after the idle timeout.
func TestNodeAPIReloadsFromDisk(t *testing.T) {
	requireNodeagent(t)
	ctx := framework.Context(t, 5*time.Minute)
	cfg := framework.Cluster(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	servingA := writeServingCert(t, certFile, keyFile)
	otherCA, _ := selfSigned(t, "not the cluster's CA", true)
	if err := os.WriteFile(caFile, otherCA, 0o644); err != nil {
		t.Fatal(err)
	}
	framework.RestartAgentWith(t, ctx, fmt.Sprintf("tlsCertFile: %s\ntlsPrivateKeyFile: %s\n"+
		"streamingConnectionIdleTimeout: 5s\nauthentication:\n  x509:\n    clientCAFile: %s\n", certFile, keyFile, caFile))

	pki := filepath.Join(cfg.RunDir, "pki")
	client, err := tls.LoadX509KeyPair(filepath.Join(pki, "apiserver-kubelet-client.crt"), filepath.Join(pki, "apiserver-kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	get := func() (status int, served []byte, err error) {
		var peer []byte
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, Certificates: []tls.Certificate{client},
			VerifyConnection: func(cs tls.ConnectionState) error { peer = cs.PeerCertificates[0].Raw; return nil },
		}}}
		resp, err := c.Get("https://" + net.JoinHostPort(harness.NodeIP, "10250") + "/pods")
		if err != nil {
			return 0, nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, peer, nil
	}
	// The Node was Ready before the restart already: the new agent's API may not listen yet.
	var code int
	var served []byte
	framework.Eventually(t, time.Minute, func() error {
		var err error
		code, served, err = get()
		return err
	})
	if !bytes.Equal(served, servingA) {
		t.Errorf("the node API serves another certificate than its tlsCertFile's")
	}
	if code != http.StatusUnauthorized {
		t.Errorf("GET /pods with a client certificate of a CA the clientCAFile does not name = %d, want 401", code)
	}

	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		if code, _, err := get(); err != nil || code != http.StatusOK {
			return fmt.Errorf("GET /pods with the cluster CA in the clientCAFile = %d, %v; want 200", code, err)
		}
		return nil
	})
	servingB := writeServingCert(t, certFile, keyFile)
	framework.Eventually(t, 2*time.Minute, func() error {
		if _, served, err := get(); err != nil || !bytes.Equal(served, servingB) {
			return fmt.Errorf("the rewritten serving certificate is not served yet (%v)", err)
		}
		return nil
	})

	// A port-forward stream that carries nothing is closed after the idle timeout.
	pod := waitPod(t, createPod(t, busyboxPod("idle-stream", corev1.RestartPolicyAlways, "sleep 3600")), 2*time.Minute, runningAndReady)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", net.JoinHostPort(harness.NodeIP, "10250"),
		&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{client}, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	spdy := "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n"
	if resp := rawNodeRequest(t, conn, bufio.NewReader(conn), "POST", fmt.Sprintf("/portForward/%s/%s", pod.Namespace, pod.Name), "", spdy); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("port-forward upgrade = %d, want 101", resp.StatusCode)
	}
	if closed, after := closedWithin(conn, time.Minute); !closed || after < 4*time.Second {
		t.Errorf("an idle port-forward stream: closed %v after %s, want closed after about 5s", closed, after)
	}
}

// writeServingCert writes a new self-signed serving certificate for the node's IP and its
// key to the files, and returns the certificate (DER).
func writeServingCert(t *testing.T, certFile, keyFile string) []byte {
	t.Helper()
	certPEM, keyPEM := selfSigned(t, harness.NodeName, false)
	// The key first: an agent that reads between the two writes sees a mismatch and keeps
	// what it has.
	if err := os.WriteFile(keyFile+".tmp", keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile+".tmp", certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(keyFile+".tmp", keyFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(certFile+".tmp", certFile); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	return block.Bytes
}

// selfSigned makes a self-signed certificate (a CA, or a serving certificate for the
// node's IP) and its key, in PEM.
func selfSigned(t *testing.T, cn string, isCA bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: isCA,
	}
	if !isCA {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP(harness.NodeIP)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
