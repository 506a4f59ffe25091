//go:build e2e

// Package tlsbootstrap brings up its own cluster whose node starts from a bootstrap token
// kubeconfig alone (NODEAGENT_TLS_BOOTSTRAP) with certificates issued for two minutes, and
// watches the agent bootstrap, rotate its client and serving certificates without a
// restart, and fall back to the bootstrap kubeconfig when its certificate expired while it
// was down.
package tlsbootstrap

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// certDuration is the controller-manager's --cluster-signing-duration: with the signer's
// five minutes of backdating, a certificate is renewed 0–80 s after it is issued.
const certDuration = 2 * time.Minute

var pemName = regexp.MustCompile(`^kubelet-(client|server)-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}\.pem$`)

func TestTLSBootstrapAndRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cfg := &harness.Config{TLSBootstrap: true, CertDuration: certDuration}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	before, cs := framework.UpOwnCluster(ctx, t, cfg)

	// Bootstrapped: the controller-manager approved the node's client CSR, sent with the
	// bootstrap token, and the agent laid out its files as the kubelet does.
	assertBootstrapped(ctx, t, cfg, cs, "system:bootstrap:")
	client := symlinkTarget(t, cfg, "kubelet-client-current.pem")
	firstExpiry := leaf(t, filepath.Join(cfg.AgentCertDir(), client)).NotAfter

	// A pod that runs across every rotation, logging once a second.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ticker", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "ticker", Image: harness.BusyboxImage,
				Command: []string{"sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done"},
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	containerID := waitRunning(ctx, t, cs, "ticker")
	pid := cfg.AgentPid()

	// Rotations: at least two of each certificate, with the Lease renewed, the pod untouched
	// and kubectl logs (the apiserver dialling the node API) working across every swap; and
	// on past the first client certificate's expiry, after which the apiserver refuses it
	// even on a connection opened before (it checks the chain at each request): a Lease
	// still renewed then was renewed with a newer certificate.
	clientSeen := map[string]bool{client: true}
	serverSeen := map[string]bool{}
	deadline := time.Now().Add(8 * time.Minute)
	var lastRenew time.Time
	for len(clientSeen) < 3 || len(serverSeen) < 3 || !lastRenew.After(firstExpiry) {
		if time.Now().After(deadline) {
			t.Fatalf("in 8 minutes saw client certificates %v and serving certificates %v (want 3 of each), lease renewed last at %s (want after %s)",
				keys(clientSeen), keys(serverSeen), lastRenew, firstExpiry)
		}
		time.Sleep(3 * time.Second)
		if _, err := cfg.ApproveServingCSRs(ctx); err != nil {
			t.Fatalf("approve serving CSRs: %v", err)
		}
		clientSeen[symlinkTarget(t, cfg, "kubelet-client-current.pem")] = true
		if target, ok := maybeSymlinkTarget(t, cfg, "kubelet-server-current.pem"); ok && !serverSeen[target] {
			serverSeen[target] = true
			t.Logf("serving certificate %s", target)
			assertServed(t, cfg)
		}
		if got := cfg.AgentPid(); got != pid {
			t.Fatalf("the agent restarted (pid %d, then %d)", pid, got)
		}
		lastRenew = assertLeaseFresh(ctx, t, cs, lastRenew)
		if id := waitRunning(ctx, t, cs, "ticker"); id != containerID {
			t.Fatalf("container of the pod changed from %s to %s", containerID, id)
		}
		if out, err := kubectl(ctx, cfg, "logs", "--tail=1", "ticker"); err != nil || !strings.HasPrefix(out, "tick ") {
			t.Fatalf("kubectl logs = %q, %v", out, err)
		}
	}
	t.Logf("client certificates %v; serving certificates %v", keys(clientSeen), keys(serverSeen))
	assertClientCSRs(ctx, t, cs, "system:node:"+harness.NodeName, 2)

	// A certificate that expired while the agent was down: the agent bootstraps again with
	// the bootstrap kubeconfig, and the pod keeps its container.
	if err := cfg.StopAgent(ctx); err != nil {
		t.Fatal(err)
	}
	expired := installExpiredClientCert(t, cfg)
	if err := cfg.StartAgent(ctx); err != nil {
		t.Fatalf("agent with an expired certificate: %v", err)
	}
	// The Node may still be Ready from before the stop: wait for the new pair itself.
	framework.Eventually(t, 2*time.Minute, func() error {
		if after := symlinkTarget(t, cfg, "kubelet-client-current.pem"); after == expired {
			return fmt.Errorf("still on the expired certificate %s", after)
		}
		return nil
	})
	assertClientCSRs(ctx, t, cs, "system:bootstrap:", 2)
	if id := waitRunning(ctx, t, cs, "ticker"); id != containerID {
		t.Fatalf("container of the pod changed across the re-bootstrap: %s, then %s", containerID, id)
	}

	if err := harness.Down(ctx, cfg); err != nil {
		t.Fatalf("down: %v", err)
	}
	now, err := framework.ReadMachineState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if left := framework.Leftovers(before, now); len(left) > 0 {
		t.Errorf("down left behind:\n  %s", strings.Join(left, "\n  "))
	}
}

// leaf is the certificate in a pem file of the cert dir.
func leaf(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := certutil.ParseCertsPEM(data)
	if err != nil || len(certs) == 0 {
		t.Fatalf("%s: %v", path, err)
	}
	return certs[0]
}

// assertServed wants the node API on :10250 to present the serving certificate that
// kubelet-server-current.pem points at (within a few seconds: new connections pick up a
// rotated certificate). The pem is read again at each try: a certificate whose rotation
// deadline falls at once (a short-lived one, backdated by the signer) is replaced within
// seconds of being issued, and the newer one is then the one to serve.
func assertServed(t *testing.T, cfg *harness.Config) {
	t.Helper()
	addr := net.JoinHostPort(harness.NodeIP, "10250")
	framework.Eventually(t, 15*time.Second, func() error {
		target, ok := maybeSymlinkTarget(t, cfg, "kubelet-server-current.pem")
		if !ok {
			return errors.New("no kubelet-server-current.pem")
		}
		want := leaf(t, filepath.Join(cfg.AgentCertDir(), target))
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return err
		}
		defer conn.Close()
		got := conn.ConnectionState().PeerCertificates[0]
		if got.SerialNumber.Cmp(want.SerialNumber) != 0 {
			return fmt.Errorf("%s serves serial %s, the current pem (%s) holds %s", addr, got.SerialNumber, target, want.SerialNumber)
		}
		return nil
	})
}

// assertBootstrapped checks the CSR, the files and the node after a bootstrap.
func assertBootstrapped(ctx context.Context, t *testing.T, cfg *harness.Config, cs kubernetes.Interface, requester string) {
	t.Helper()
	assertClientCSRs(ctx, t, cs, requester, 1)
	current := filepath.Join(cfg.AgentCertDir(), "kubelet-client-current.pem")
	target := symlinkTarget(t, cfg, "kubelet-client-current.pem")
	if !pemName.MatchString(target) {
		t.Errorf("kubelet-client-current.pem -> %s, want kubelet-client-<timestamp>.pem", target)
	}
	if st, err := os.Stat(current); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, %v; want 0600", current, st.Mode(), err)
	}
	if st, err := os.Stat(cfg.AgentKubeconfig()); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, %v; want 0600", st.Mode(), err)
	}
	kc, err := clientcmd.LoadFromFile(cfg.AgentKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	auth := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	if auth == nil || auth.ClientCertificate != current || auth.ClientKey != current {
		t.Errorf("kubeconfig user %+v, want client-certificate and client-key %s", auth, current)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Fatalf("node not Ready: %s", c.Message)
		}
	}
}

// assertClientCSRs wants at least n approved and issued client CSRs of the node from
// requesters whose name starts with requester.
func assertClientCSRs(ctx context.Context, t *testing.T, cs kubernetes.Interface, requester string, n int) {
	t.Helper()
	framework.Eventually(t, time.Minute, func() error {
		list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var issued []string
		for _, csr := range list.Items {
			if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || !strings.HasPrefix(csr.Spec.Username, requester) {
				continue
			}
			for _, c := range csr.Status.Conditions {
				if c.Type == certificatesv1.CertificateApproved && len(csr.Status.Certificate) > 0 {
					issued = append(issued, csr.Name)
				}
			}
		}
		if len(issued) < n {
			return fmt.Errorf("%d issued client CSRs from %s*, want %d", len(issued), requester, n)
		}
		return nil
	})
}

func symlinkTarget(t *testing.T, cfg *harness.Config, name string) string {
	t.Helper()
	target, ok := maybeSymlinkTarget(t, cfg, name)
	if !ok {
		t.Fatalf("%s is not a symlink", name)
	}
	return target
}

func maybeSymlinkTarget(t *testing.T, cfg *harness.Config, name string) (string, bool) {
	t.Helper()
	target, err := os.Readlink(filepath.Join(cfg.AgentCertDir(), name))
	if err != nil {
		return "", false
	}
	if !pemName.MatchString(filepath.Base(target)) {
		t.Fatalf("%s -> %s, want kubelet-*-<timestamp>.pem", name, target)
	}
	return filepath.Base(target), true
}

// assertLeaseFresh fails when the node's Lease was not renewed within its duration, and
// wants its renewTime never to go back.
func assertLeaseFresh(ctx context.Context, t *testing.T, cs kubernetes.Interface, last time.Time) time.Time {
	t.Helper()
	lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renew := lease.Spec.RenewTime.Time
	if age := time.Since(renew); age > time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second {
		t.Fatalf("lease last renewed %s ago", age.Round(time.Second))
	}
	if renew.Before(last) {
		t.Fatalf("lease renewTime went back from %s to %s", last, renew)
	}
	return renew
}

// waitRunning waits for the pod's container to run and returns its ID; a restart fails.
func waitRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	var id string
	framework.Eventually(t, 2*time.Minute, func() error {
		pod, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range pod.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				t.Fatalf("container %s restarted %d times", s.Name, s.RestartCount)
			}
			if s.State.Running != nil {
				id = s.ContainerID
				return nil
			}
		}
		return fmt.Errorf("pod %s not running: %s", name, pod.Status.Phase)
	})
	return id
}

func kubectl(ctx context.Context, cfg *harness.Config, args ...string) (string, error) {
	version, err := harness.KubeVersion(cfg.RepoDir)
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, filepath.Join(cfg.BinDir(version), "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cfg.Kubeconfig())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return string(out), nil
}

// installExpiredClientCert makes the agent's current client pair one signed by the cluster
// CA that expired a minute ago, as if the agent had been down past its expiry, and returns
// its file name.
func installExpiredClientCert(t *testing.T, cfg *harness.Config) string {
	t.Helper()
	pki := filepath.Join(cfg.RunDir, "pki")
	caCertPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := keyutil.PrivateKeyFromFile(filepath.Join(pki, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caCertPEM)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "system:node:" + harness.NodeName, Organization: []string{"system:nodes"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(-time.Minute),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	name := "kubelet-client-2000-01-01-00-00-00.pem"
	data := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
	dir := cfg.AgentCertDir()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "kubelet-client-current.pem")
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, name), link); err != nil {
		t.Fatal(err)
	}
	return name
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
