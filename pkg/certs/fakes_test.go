package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// testCA signs certificates for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pemEncode("CERTIFICATE", der)}
}

var serials struct {
	sync.Mutex
	n int64
}

func nextSerial() *big.Int {
	serials.Lock()
	defer serials.Unlock()
	serials.n++
	return big.NewInt(100 + serials.n)
}

// sign issues a certificate for the request with the given life, starting now.
func (ca *testCA) sign(t *testing.T, req *x509.CertificateRequest, life time.Duration, usage x509.ExtKeyUsage) []byte {
	t.Helper()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      req.Subject,
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPAddresses,
		NotBefore:    now.Add(-time.Second),
		NotAfter:     now.Add(life),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, req.PublicKey, ca.key)
	if err != nil {
		t.Error(err)
		return nil
	}
	return pemEncode("CERTIFICATE", der)
}

// signer is a fake certificates API: it approves and issues every CSR at
// creation, as the controller-manager's approver and signer would, and
// remembers what it was asked.
type signer struct {
	t    *testing.T
	ca   *testCA
	life time.Duration

	mu       sync.Mutex
	requests []*certificatesv1.CertificateSigningRequest
	// verdict, when set, decides the n-th CSR (from 0) at its creation:
	// CertificateApproved issues it, CertificateDenied denies it, ""
	// leaves it pending.
	verdict func(n int) certificatesv1.RequestConditionType
}

func (s *signer) setVerdict(v func(n int) certificatesv1.RequestConditionType) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verdict = v
}

// newSignerClient is a fake clientset whose CSRs are issued by s. Lists
// honour the name field selector the CSR waiter uses (the fake ignores
// field selectors), and CSRs get UIDs (the fake leaves them empty).
func newSignerClient(t *testing.T, ca *testCA, life time.Duration) (*fake.Clientset, *signer) {
	s := &signer{t: t, ca: ca, life: life}
	client := fake.NewClientset()
	client.PrependReactor("create", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		csr := action.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		s.mu.Lock()
		n := len(s.requests)
		s.requests = append(s.requests, csr.DeepCopy())
		verdict := certificatesv1.CertificateApproved
		if s.verdict != nil {
			verdict = s.verdict(n)
		}
		s.mu.Unlock()
		if csr.Name == "" {
			csr.Name = fmt.Sprintf("%s%d", csr.GenerateName, n)
		}
		csr.UID = types.UID(fmt.Sprintf("uid-%d", n))
		switch verdict {
		case "":
			return false, nil, nil
		case certificatesv1.CertificateDenied:
			csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
				Type: certificatesv1.CertificateDenied, Status: "True", Reason: "NotMyNode", LastUpdateTime: metav1.Now(),
			}}
			return false, nil, nil
		}
		block, _ := pem.Decode(csr.Spec.Request)
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			return true, nil, err
		}
		usage := x509.ExtKeyUsageClientAuth
		if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName {
			usage = x509.ExtKeyUsageServerAuth
		}
		csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
			Type: certificatesv1.CertificateApproved, Status: "True", Reason: "AutoApproved", LastUpdateTime: metav1.Now(),
		}}
		csr.Status.Certificate = ca.sign(t, req, s.life, usage)
		return false, nil, nil // the tracker stores it
	})
	client.PrependReactor("list", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sel := action.(k8stesting.ListAction).GetListRestrictions().Fields
		obj, err := client.Tracker().List(certificatesv1.SchemeGroupVersion.WithResource("certificatesigningrequests"),
			certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest"), "")
		if err != nil || sel == nil || sel.Empty() {
			return true, obj, err
		}
		list := obj.(*certificatesv1.CertificateSigningRequestList)
		var items []certificatesv1.CertificateSigningRequest
		for _, c := range list.Items {
			if sel.Matches(fields.Set{"metadata.name": c.Name}) {
				items = append(items, c)
			}
		}
		list.Items = items
		return true, list, nil
	})
	return client, s
}

func (s *signer) sent() []*certificatesv1.CertificateSigningRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*certificatesv1.CertificateSigningRequest(nil), s.requests...)
}

// writeBootstrapKubeconfig writes a token kubeconfig for server.
func writeBootstrapKubeconfig(t *testing.T, dir, server string, caPEM []byte) string {
	t.Helper()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bootstrap-kubelet.conf")
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority: %q}
users:
- name: u
  user: {token: abcdef.0123456789abcdef}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, server, caFile)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// servingPair makes a key pair for a test server's certificate.
func servingPair(t *testing.T, ca *testCA, life time.Duration) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	req := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, PublicKey: &key.PublicKey}
	certPEM := ca.sign(t, req, life, x509.ExtKeyUsageServerAuth)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	pair, err := tls.X509KeyPair(certPEM, pemEncode("EC PRIVATE KEY", keyDER))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// issue makes a client certificate and its key, PEM, for a new key.
func (ca *testCA) issue(t *testing.T, cn string, life time.Duration) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = ca.sign(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}, PublicKey: &key.PublicKey}, life, x509.ExtKeyUsageClientAuth)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, pemEncode("EC PRIVATE KEY", keyDER)
}

// serialOf is the serial of a PEM certificate's first certificate.
func serialOf(t *testing.T, certPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}
