package volume

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	testclock "k8s.io/utils/clock/testing"
)

// fakeSigner plays the apiserver's PodCertificateRequest storage and a
// signer: it names created requests, and answers reads with what the test
// made of them (issued, denied, failed, deleted).
type fakeSigner struct {
	t     *testing.T
	clock *testclock.FakeClock
	ca    *x509.Certificate
	caKey crypto.Signer

	mu      sync.Mutex
	created []*certificatesv1.PodCertificateRequest
	byName  map[string]*certificatesv1.PodCertificateRequest
	gets    int
}

func newFakeSigner(t *testing.T, clk *testclock.FakeClock) *fakeSigner {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: clk.Now().Add(-time.Hour), NotAfter: clk.Now().Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeSigner{t: t, clock: clk, ca: ca, caKey: key, byName: map[string]*certificatesv1.PodCertificateRequest{}}
}

func (s *fakeSigner) install(f *fixture) {
	f.client.PrependReactor("create", "podcertificaterequests", s.create)
	f.client.PrependReactor("get", "podcertificaterequests", s.get)
}

func (s *fakeSigner) create(action k8stesting.Action) (bool, runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pcr := action.(k8stesting.CreateAction).GetObject().(*certificatesv1.PodCertificateRequest).DeepCopy()
	if pcr.Name != "" || pcr.GenerateName == "" {
		return true, nil, fmt.Errorf("request named %q with generateName %q", pcr.Name, pcr.GenerateName)
	}
	pcr.Name = fmt.Sprintf("%s%d", pcr.GenerateName, len(s.created)+1)
	pcr.CreationTimestamp = metav1.NewTime(s.clock.Now())
	s.created = append(s.created, pcr.DeepCopy())
	s.byName[pcr.Name] = pcr
	return true, pcr.DeepCopy(), nil
}

func (s *fakeSigner) get(action k8stesting.Action) (bool, runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	name := action.(k8stesting.GetAction).GetName()
	pcr, ok := s.byName[name]
	if !ok {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "certificates.k8s.io", Resource: "podcertificaterequests"}, name)
	}
	return true, pcr.DeepCopy(), nil
}

func (s *fakeSigner) counts() (creates, gets int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.created), s.gets
}

func (s *fakeSigner) last() *certificatesv1.PodCertificateRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created[len(s.created)-1]
}

// issue certifies the named request's key for lifetime, asking for a
// refresh at refreshAfter. The chain carries headers and text between
// blocks, which must not reach the pod.
func (s *fakeSigner) issue(name string, refreshAfter, lifetime time.Duration) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	pcr := s.byName[name]
	csr, err := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request)
	if err != nil {
		s.t.Fatal(err)
	}
	now := s.clock.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(len(s.created) + 1)), NotBefore: now, NotAfter: now.Add(lifetime)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, csr.PublicKey, s.caKey)
	if err != nil {
		s.t.Fatal(err)
	}
	leaf := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"Note": "leaf"}, Bytes: der})
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.ca.Raw})
	pcr.Status = certificatesv1.PodCertificateRequestStatus{
		Conditions:       []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeIssued, Status: metav1.ConditionTrue, Reason: "Signed"}},
		CertificateChain: "leaf follows\n" + string(leaf) + "intermediate follows\n" + string(ca),
		NotBefore:        ptr(metav1.NewTime(now)),
		BeginRefreshAt:   ptr(metav1.NewTime(now.Add(refreshAfter))),
		NotAfter:         ptr(metav1.NewTime(now.Add(lifetime))),
	}
}

func (s *fakeSigner) refuse(name, condType, reason, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byName[name].Status.Conditions = []metav1.Condition{{Type: condType, Status: metav1.ConditionTrue, Reason: reason, Message: message}}
}

func (s *fakeSigner) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byName, name)
}

const testSigner = "example.com/spiffe"

func podCertPod(proj v1.PodCertificateProjection) *v1.Pod {
	return basePod(withVolume("tls", v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: ptr(int32(0o640)),
		Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}},
			{PodCertificate: &proj},
		}}}))
}

func baseProjection() v1.PodCertificateProjection {
	return v1.PodCertificateProjection{
		SignerName:           testSigner,
		KeyType:              "ECDSAP256",
		MaxExpirationSeconds: ptr(int32(3600)),
		CredentialBundlePath: "bundle.pem",
		KeyPath:              "key.pem",
		CertificateChainPath: "chain.pem",
		UserAnnotations:      map[string]string{"example.com/path": "/w"},
	}
}

func newPodCertFixture(t *testing.T) (*fixture, *fakeSigner) {
	t.Helper()
	f := newFixture(t,
		&v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder", Namespace: "ns", UID: "sa-uid"}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-uid"}},
		configMap("cm", map[string]string{"k": "v"}))
	s := newFakeSigner(t, f.clock)
	s.install(f)
	f.mgr.certs.jitter = func(time.Duration) time.Duration { return 0 }
	return f, s
}

func TestPodCertIssued(t *testing.T) {
	f, signer := newPodCertFixture(t)
	ctx := context.Background()
	pod := podCertPod(baseProjection())

	_, err := f.mgr.MountPod(ctx, pod)
	if !errors.Is(err, errPodCertPending) || !strings.Contains(err.Error(), `waiting for PodCertificateRequest ns/req-1 to be issued by signer "example.com/spiffe"`) {
		t.Fatalf("first mount: %v", err)
	}
	var me *MountError
	if !errors.As(err, &me) || me.Volume != "tls" {
		t.Errorf("error does not name the volume: %v", err)
	}
	req := signer.last()
	want := certificatesv1.PodCertificateRequestSpec{
		SignerName: testSigner, PodName: "web", PodUID: pod.UID,
		ServiceAccountName: "builder", ServiceAccountUID: "sa-uid",
		NodeName: "node-a", NodeUID: "node-uid",
		MaxExpirationSeconds:      ptr(int32(3600)),
		UnverifiedUserAnnotations: map[string]string{"example.com/path": "/w"},
	}
	got := req.Spec
	got.StubPKCS10Request = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spec = %+v\nwant %+v", got, want)
	}
	if req.Namespace != "ns" || req.GenerateName != "req-" {
		t.Errorf("request %s/%s generateName %q", req.Namespace, req.Name, req.GenerateName)
	}
	if refs := req.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Pod" || refs[0].UID != pod.UID || refs[0].Name != "web" {
		t.Errorf("ownerReferences = %+v", refs)
	}
	csr, err := x509.ParseCertificateRequest(req.Spec.StubPKCS10Request)
	if err != nil || csr.CheckSignature() != nil {
		t.Fatalf("stub CSR: %v", err)
	}
	if pub, ok := csr.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("CSR public key %T", csr.PublicKey)
	}

	// Still pending: the request is read, not made again.
	if _, err := f.mgr.MountPod(ctx, pod); !errors.Is(err, errPodCertPending) {
		t.Fatalf("second mount: %v", err)
	}
	if c, g := signer.counts(); c != 1 || g != 1 {
		t.Errorf("creates=%d gets=%d, want 1 and 1", c, g)
	}

	signer.issue("req-1", 20*time.Hour, 24*time.Hour)
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, chainPEM, bundle := readVol(t, mounts["tls"], "key.pem"), readVol(t, mounts["tls"], "chain.pem"), readVol(t, mounts["tls"], "bundle.pem")
	if bundle != keyPEM+chainPEM {
		t.Errorf("bundle is not the key followed by the chain:\n%s", bundle)
	}
	if readVol(t, mounts["tls"], "k") != "v" {
		t.Error("configMap source lost")
	}
	if strings.Contains(chainPEM, "follows") || strings.Contains(chainPEM, "Note") {
		t.Errorf("chain keeps text between blocks or headers:\n%s", chainPEM)
	}
	checkKeyMatchesChain(t, keyPEM, chainPEM, 2)
	for _, name := range []string{"key.pem", "chain.pem", "bundle.pem"} {
		fi, err := os.Stat(filepath.Join(mounts["tls"].HostPath, name))
		if err != nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("%s: %v %v, want mode 0640", name, fi.Mode(), err)
		}
	}

	// Issued: later syncs touch no PodCertificateRequest.
	c0, g0 := signer.counts()
	f.clock.Step(time.Hour)
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if c, g := signer.counts(); c != c0 || g != g0 {
		t.Errorf("issued credential re-requested: creates %d->%d gets %d->%d", c0, c, g0, g)
	}
	if next, ok := f.mgr.NextRefresh(pod.UID); !ok || !next.Equal(f.clock.Now().Add(19*time.Hour)) {
		t.Errorf("NextRefresh = %v %v, want beginRefreshAt", next, ok)
	}
}

// checkKeyMatchesChain parses the PKCS#8 key and the chain and checks the
// leaf certifies the key.
func checkKeyMatchesChain(t *testing.T, keyPEM, chainPEM string, wantCerts int) {
	t.Helper()
	b, rest := pem.Decode([]byte(keyPEM))
	if b == nil || b.Type != "PRIVATE KEY" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("key file is not one PRIVATE KEY block: %q", keyPEM)
	}
	key, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var certs []*x509.Certificate
	for r := []byte(chainPEM); ; {
		var cb *pem.Block
		cb, r = pem.Decode(r)
		if cb == nil {
			break
		}
		if cb.Type != "CERTIFICATE" {
			t.Errorf("chain block %q", cb.Type)
		}
		c, err := x509.ParseCertificate(cb.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	if len(certs) != wantCerts {
		t.Fatalf("chain has %d certificates, want %d", len(certs), wantCerts)
	}
	if !key.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(certs[0].PublicKey) {
		t.Error("leaf certificate does not certify the key")
	}
}

func TestPodCertRefused(t *testing.T) {
	tests := []struct {
		name, condType, want string
	}{
		{name: "denied", condType: certificatesv1.PodCertificateRequestConditionTypeDenied,
			want: `PodCertificateRequest ns/req-1 for signer "example.com/spiffe" was denied: reason="UnsupportedKeyType" message="use ED25519"`},
		{name: "failed", condType: certificatesv1.PodCertificateRequestConditionTypeFailed,
			want: `PodCertificateRequest ns/req-1 for signer "example.com/spiffe" failed: reason="UnsupportedKeyType" message="use ED25519"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, signer := newPodCertFixture(t)
			ctx := context.Background()
			pod := podCertPod(baseProjection())
			if _, err := f.mgr.MountPod(ctx, pod); !errors.Is(err, errPodCertPending) {
				t.Fatal(err)
			}
			signer.refuse("req-1", tc.condType, certificatesv1.PodCertificateRequestConditionUnsupportedKeyType, "use ED25519")
			for i := range 2 {
				_, err := f.mgr.MountPod(ctx, pod)
				if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, errPodCertPending) {
					t.Fatalf("mount %d: %v\nwant %s", i, err, tc.want)
				}
			}
			// Permanent: no new request, no more reads.
			if c, g := signer.counts(); c != 1 || g != 1 {
				t.Errorf("creates=%d gets=%d, want 1 and 1", c, g)
			}
			if _, ok := f.mgr.NextRefresh(pod.UID); ok {
				t.Error("a refused source asks for wake-ups")
			}
		})
	}
}

func TestPodCertRefresh(t *testing.T) {
	f, signer := newPodCertFixture(t)
	ctx := context.Background()
	pod := podCertPod(baseProjection())
	if _, err := f.mgr.MountPod(ctx, pod); !errors.Is(err, errPodCertPending) {
		t.Fatal(err)
	}
	signer.issue("req-1", time.Hour, 2*time.Hour)
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	oldBundle := readVol(t, mounts["tls"], "bundle.pem")

	f.clock.Step(59 * time.Minute)
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if c, _ := signer.counts(); c != 1 {
		t.Fatalf("refreshed before beginRefreshAt: %d requests", c)
	}

	// Due: a new request with a new key, the old credential still served.
	f.clock.Step(time.Minute)
	if mounts, err = f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if c, _ := signer.counts(); c != 2 {
		t.Fatalf("requests = %d, want a refresh request", c)
	}
	if bytes.Equal(signer.created[0].Spec.StubPKCS10Request, signer.created[1].Spec.StubPKCS10Request) {
		t.Error("refresh reused the key")
	}
	if got := readVol(t, mounts["tls"], "bundle.pem"); got != oldBundle {
		t.Error("credential changed before the refresh was issued")
	}
	// The request is read after a back-off, not on every sync.
	next, ok := f.mgr.NextRefresh(pod.UID)
	if !ok || !next.Equal(f.clock.Now().Add(podCertRetryInitial)) {
		t.Errorf("NextRefresh = %v %v, want in %v", next, ok, podCertRetryInitial)
	}
	_, g0 := signer.counts()
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, g := signer.counts(); g != g0 {
		t.Error("pending refresh read before its back-off")
	}
	f.clock.Step(podCertRetryInitial)
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, g := signer.counts(); g != g0+1 {
		t.Errorf("gets = %d, want %d", g, g0+1)
	}
	if next, _ := f.mgr.NextRefresh(pod.UID); !next.Equal(f.clock.Now().Add(2 * podCertRetryInitial)) {
		t.Errorf("NextRefresh = %v, want the back-off doubled", next)
	}

	f.clock.Step(2 * podCertRetryInitial)
	signer.issue("req-2", time.Hour, 2*time.Hour)
	if mounts, err = f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	newBundle := readVol(t, mounts["tls"], "bundle.pem")
	if newBundle == oldBundle {
		t.Fatal("refreshed credential not written")
	}
	checkKeyMatchesChain(t, readVol(t, mounts["tls"], "key.pem"), readVol(t, mounts["tls"], "chain.pem"), 2)
	if readVol(t, mounts["tls"], "key.pem") == strings.SplitAfter(oldBundle, "-----END PRIVATE KEY-----\n")[0] {
		t.Error("refresh kept the old key")
	}
}

func TestPodCertRefreshRefused(t *testing.T) {
	f, signer := newPodCertFixture(t)
	ctx := context.Background()
	pod := podCertPod(baseProjection())
	_, _ = f.mgr.MountPod(ctx, pod)
	signer.issue("req-1", time.Hour, 2*time.Hour)
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(time.Hour)
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	signer.refuse("req-2", certificatesv1.PodCertificateRequestConditionTypeDenied, "NoMore", "pod is quarantined")
	f.clock.Step(podCertRetryInitial)
	// As the kubelet: a denial is final even with a credential issued
	// before; the volume keeps its files, the error says why.
	_, err := f.mgr.MountPod(ctx, pod)
	if err == nil || !strings.Contains(err.Error(), `reason="NoMore" message="pod is quarantined"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestPodCertRequestDeleted(t *testing.T) {
	f, signer := newPodCertFixture(t)
	ctx := context.Background()
	pod := podCertPod(baseProjection())
	_, _ = f.mgr.MountPod(ctx, pod)
	signer.remove("req-1")

	// Not found may be lag (the node authorizer answers forbidden then):
	// wait, and say what the read returned.
	_, err := f.mgr.MountPod(ctx, pod)
	if !errors.Is(err, errPodCertPending) || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("err = %v", err)
	}
	if c, _ := signer.counts(); c != 1 {
		t.Fatalf("new request before the abandon time: %d", c)
	}
	f.clock.Step(podCertAbandonAfter)
	if _, err := f.mgr.MountPod(ctx, pod); !errors.Is(err, errPodCertPending) {
		t.Fatalf("err = %v", err)
	}
	if _, err := f.mgr.MountPod(ctx, pod); !errors.Is(err, errPodCertPending) || !strings.Contains(err.Error(), "req-2") {
		t.Fatalf("err = %v", err)
	}
	signer.issue("req-2", time.Hour, 2*time.Hour)
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

func TestPodCertForgottenWithPod(t *testing.T) {
	f, signer := newPodCertFixture(t)
	ctx := context.Background()
	pod := podCertPod(baseProjection())
	_, _ = f.mgr.MountPod(ctx, pod)
	signer.issue("req-1", time.Hour, 2*time.Hour)
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.mgr.NextRefresh(pod.UID); ok {
		t.Error("state kept after the pod went")
	}
	if len(f.mgr.certs.state) != 0 {
		t.Errorf("state = %v", f.mgr.certs.state)
	}
}

func TestPodCertSourcesApart(t *testing.T) {
	// Two sources of one volume, and the same source in two pods, are
	// separate credentials.
	f, signer := newPodCertFixture(t)
	ctx := context.Background()
	second := baseProjection()
	second.CredentialBundlePath, second.KeyPath, second.CertificateChainPath = "b2.pem", "", ""
	pod := podCertPod(baseProjection())
	pod.Spec.Volumes[0].Projected.Sources = append(pod.Spec.Volumes[0].Projected.Sources, v1.VolumeProjection{PodCertificate: &second})
	other := pod.DeepCopy()
	other.UID, other.Name = types.UID("uid-2"), "web-2"
	_, _ = f.mgr.MountPod(ctx, pod)
	_, _ = f.mgr.MountPod(ctx, other)
	if c, _ := signer.counts(); c != 4 {
		t.Fatalf("requests = %d, want 4", c)
	}
	for i := 1; i <= 4; i++ {
		signer.issue(fmt.Sprintf("req-%d", i), time.Hour, 2*time.Hour)
	}
	m1, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := f.mgr.MountPod(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := readVol(t, m1["tls"], "bundle.pem"), readVol(t, m1["tls"], "b2.pem"), readVol(t, m2["tls"], "bundle.pem")
	if a == b || a == c || b == c {
		t.Error("sources share a credential")
	}
}

func TestNewPodCertKey(t *testing.T) {
	tests := []struct {
		keyType string
		check   func(pub crypto.PublicKey) bool
	}{
		{"RSA3072", func(p crypto.PublicKey) bool { k, ok := p.(*rsa.PublicKey); return ok && k.N.BitLen() == 3072 }},
		{"RSA4096", func(p crypto.PublicKey) bool { k, ok := p.(*rsa.PublicKey); return ok && k.N.BitLen() == 4096 }},
		{"ECDSAP256", func(p crypto.PublicKey) bool { k, ok := p.(*ecdsa.PublicKey); return ok && k.Curve == elliptic.P256() }},
		{"ECDSAP384", func(p crypto.PublicKey) bool { k, ok := p.(*ecdsa.PublicKey); return ok && k.Curve == elliptic.P384() }},
		{"ECDSAP521", func(p crypto.PublicKey) bool { k, ok := p.(*ecdsa.PublicKey); return ok && k.Curve == elliptic.P521() }},
		{"ED25519", func(p crypto.PublicKey) bool { _, ok := p.(ed25519.PublicKey); return ok }},
	}
	for _, tc := range tests {
		t.Run(tc.keyType, func(t *testing.T) {
			t.Parallel()
			keyPEM, der, err := newPodCertKey(tc.keyType)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := pem.Decode(keyPEM)
			if b == nil || b.Type != "PRIVATE KEY" {
				t.Fatalf("key PEM %q", keyPEM)
			}
			key, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			csr, err := x509.ParseCertificateRequest(der)
			if err != nil {
				t.Fatal(err)
			}
			if err := csr.CheckSignature(); err != nil {
				t.Errorf("stub request signature: %v", err)
			}
			if !tc.check(csr.PublicKey) {
				t.Errorf("public key %T", csr.PublicKey)
			}
			if !key.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(csr.PublicKey) {
				t.Error("request does not carry the key's public half")
			}
			if len(csr.Subject.Names) != 0 || len(csr.DNSNames) != 0 || len(csr.Extensions) != 0 {
				t.Errorf("stub request is not empty: %+v", csr.Subject)
			}
		})
	}
	if _, _, err := newPodCertKey("DSA1024"); err == nil || !strings.Contains(err.Error(), `unsupported keyType "DSA1024"`) {
		t.Errorf("err = %v", err)
	}
}

func TestDecidePodCert(t *testing.T) {
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	cred := &podCredential{refreshAt: now.Add(time.Hour)}
	due := &podCredential{refreshAt: now}
	req := &podCertRequest{name: "req-1"}
	tests := []struct {
		name string
		st   podCertState
		want podCertStep
	}{
		{name: "nothing yet", st: podCertState{}, want: podCertCreate},
		{name: "nothing yet, creation failed recently", st: podCertState{failures: 1, nextTry: now.Add(time.Second)}, want: podCertCreate},
		{name: "first request pending", st: podCertState{pending: req, nextTry: now.Add(time.Minute)}, want: podCertPoll},
		{name: "issued, fresh", st: podCertState{issued: cred}, want: podCertServe},
		{name: "issued, due", st: podCertState{issued: due}, want: podCertCreate},
		{name: "issued, creation backing off", st: podCertState{issued: due, failures: 1, nextTry: now.Add(time.Second)}, want: podCertServe},
		{name: "refresh pending, backing off", st: podCertState{issued: due, pending: req, nextTry: now.Add(time.Second)}, want: podCertServe},
		{name: "refresh pending, time to look", st: podCertState{issued: due, pending: req, nextTry: now}, want: podCertPoll},
		{name: "denied", st: podCertState{issued: cred, final: errors.New("denied")}, want: podCertFinal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decidePodCert(tc.st, now); got != tc.want {
				t.Errorf("step = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPodCertObservedJitter(t *testing.T) {
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	issued := func(refresh, notAfter time.Duration) *certificatesv1.PodCertificateRequest {
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")})
		return &certificatesv1.PodCertificateRequest{Status: certificatesv1.PodCertificateRequestStatus{
			Conditions:       []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeIssued, Status: metav1.ConditionTrue}},
			CertificateChain: string(ca),
			BeginRefreshAt:   ptr(metav1.NewTime(now.Add(refresh))),
			NotAfter:         ptr(metav1.NewTime(now.Add(notAfter))),
		}}
	}
	st := podCertState{pending: &podCertRequest{name: "req-1", key: []byte("k")}, failures: 3}
	var asked time.Duration
	maxJitter := func(m time.Duration) time.Duration { asked = m; return m }
	tests := []struct {
		name            string
		refresh, expiry time.Duration
		wantAsked       time.Duration
	}{
		{name: "up to five minutes", refresh: 20 * time.Hour, expiry: 24 * time.Hour, wantAsked: podCertMaxJitter},
		{name: "never past half the time left", refresh: 50 * time.Minute, expiry: time.Hour, wantAsked: 5 * time.Minute},
		{name: "close to expiry", refresh: 58 * time.Minute, expiry: time.Hour, wantAsked: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := st.observed(issued(tc.refresh, tc.expiry), nil, now, maxJitter)
			if asked != tc.wantAsked || !got.issued.refreshAt.Equal(now.Add(tc.refresh+tc.wantAsked)) {
				t.Errorf("jitter asked %v, refreshAt %v", asked, got.issued.refreshAt)
			}
			if got.failures != 0 || !got.nextTry.IsZero() || got.pending != nil {
				t.Errorf("state after issue = %+v", got)
			}
		})
	}
}

func TestNormalizeChain(t *testing.T) {
	in := "junk\n-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n\nAQID\n-----END CERTIFICATE-----\nmore junk\n" +
		"-----BEGIN TRUSTED CERTIFICATE-----\nBAUG\n-----END TRUSTED CERTIFICATE-----\ntrailer"
	want := "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nBAUG\n-----END CERTIFICATE-----\n"
	if got := string(normalizeChain(in)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := normalizeChain("no pem here"); len(got) != 0 {
		t.Errorf("got %q", got)
	}
}
