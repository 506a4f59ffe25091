package certs

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// newRequest is a client CSR for node-1 with a new key.
func newRequest(t *testing.T, name string) csrRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, err := makeCSR(key, &x509.CertificateRequest{Subject: nodeSubject("node-1")})
	if err != nil {
		t.Fatal(err)
	}
	return csrRequest{name: name, signerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		usages: ClientUsages(key), csrPEM: csrPEM, key: key}
}

func csrObject(req csrRequest) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: req.name, UID: "first"},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: req.csrPEM, SignerName: req.signerName, Usages: req.usages},
	}
}

// TestSendCSRFindsItsEarlierRequest: a named CSR that exists already is
// used when it is this request, and refused when it is another one.
func TestSendCSRFindsItsEarlierRequest(t *testing.T) {
	ca := newTestCA(t)
	ours := newRequest(t, "node-csr-x")
	tests := []struct {
		name     string
		existing func(t *testing.T) *certificatesv1.CertificateSigningRequest
		wantErr  string // "" for reuse
	}{
		{name: "same request", existing: func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csrObject(ours) }},
		{name: "same request, issued", existing: func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			c := csrObject(ours)
			c.Status.Certificate = ca.sign(t, &x509.CertificateRequest{Subject: nodeSubject("node-1"), PublicKey: ours.key.Public()}, time.Hour, x509.ExtKeyUsageClientAuth)
			return c
		}},
		{name: "another key", wantErr: "different key", existing: func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			other := newRequest(t, ours.name)
			return csrObject(other)
		}},
		{name: "another signer", wantErr: "signer", existing: func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			c := csrObject(ours)
			c.Spec.SignerName = certificatesv1.KubeletServingSignerName
			return c
		}},
		{name: "issued and expired", wantErr: "expired", existing: func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			c := csrObject(ours)
			c.Status.Certificate = ca.sign(t, &x509.CertificateRequest{Subject: nodeSubject("node-1"), PublicKey: ours.key.Public()}, -time.Minute, x509.ExtKeyUsageClientAuth)
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.existing(t))
			got, err := sendCSR(context.Background(), client.CertificatesV1().CertificateSigningRequests(), ours)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("sendCSR = %v, want an error about %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != ours.name || got.UID != "first" {
				t.Errorf("sendCSR returned %s/%s, want the existing %s/first", got.Name, got.UID, ours.name)
			}
		})
	}
}

func TestSendCSRSendsARequest(t *testing.T) {
	client := fake.NewClientset()
	req := newRequest(t, "node-csr-y")
	got, err := sendCSR(context.Background(), client.CertificatesV1().CertificateSigningRequests(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != req.name || string(got.Spec.Request) != string(req.csrPEM) || got.Spec.SignerName != req.signerName {
		t.Errorf("created %+v", got)
	}
	// Unnamed requests get the apiserver's generated name.
	var sent *certificatesv1.CertificateSigningRequest
	client.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sent = a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		return true, sent, nil
	})
	if _, err := sendCSR(context.Background(), client.CertificatesV1().CertificateSigningRequests(), newRequest(t, "")); err != nil {
		t.Fatal(err)
	}
	if sent.Name != "" || sent.GenerateName != "csr-" {
		t.Errorf("unnamed request sent as name %q generateName %q", sent.Name, sent.GenerateName)
	}
}

// TestWaitForCertificate drives a pending CSR to each end while the
// waiter waits, through the watch or, where the watch is refused, by
// polling.
func TestWaitForCertificate(t *testing.T) {
	ca := newTestCA(t)
	req := newRequest(t, "node-csr-z")
	issued := ca.sign(t, &x509.CertificateRequest{Subject: nodeSubject("node-1"), PublicKey: req.key.Public()}, time.Hour, x509.ExtKeyUsageClientAuth)
	condition := func(typ certificatesv1.RequestConditionType) certificatesv1.CertificateSigningRequestCondition {
		return certificatesv1.CertificateSigningRequestCondition{Type: typ, Status: "True", Reason: "Because", Message: "said so"}
	}
	type api = *fake.Clientset
	updateStatus := func(mutate func(*certificatesv1.CertificateSigningRequest)) func(t *testing.T, c api) {
		return func(t *testing.T, c api) {
			csr, err := c.CertificatesV1().CertificateSigningRequests().Get(context.Background(), req.name, metav1.GetOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			mutate(csr)
			if _, err := c.CertificatesV1().CertificateSigningRequests().UpdateStatus(context.Background(), csr, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
		}
	}
	issue := updateStatus(func(c *certificatesv1.CertificateSigningRequest) {
		c.Status.Conditions = append(c.Status.Conditions, condition(certificatesv1.CertificateApproved))
		c.Status.Certificate = issued
	})
	refuseWatch := func(c api) {
		c.PrependWatchReactor("certificatesigningrequests", func(k8stesting.Action) (bool, watch.Interface, error) {
			return true, nil, errors.New("watch refused")
		})
	}
	tests := []struct {
		name    string
		setup   func(c api)
		change  func(t *testing.T, c api)
		wantErr string // "" for the certificate
	}{
		{name: "issued", change: issue},
		{name: "issued, watch refused: polled", setup: refuseWatch, change: issue},
		{name: "approved, not yet issued, then issued", change: func(t *testing.T, c api) {
			updateStatus(func(c *certificatesv1.CertificateSigningRequest) {
				c.Status.Conditions = append(c.Status.Conditions, condition(certificatesv1.CertificateApproved))
			})(t, c)
			time.Sleep(20 * time.Millisecond)
			updateStatus(func(c *certificatesv1.CertificateSigningRequest) { c.Status.Certificate = issued })(t, c)
		}},
		{name: "denied", wantErr: "denied: Because: said so", change: updateStatus(func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = append(c.Status.Conditions, condition(certificatesv1.CertificateDenied))
		})},
		{name: "denied, watch refused: polled", setup: refuseWatch, wantErr: "denied", change: updateStatus(func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = append(c.Status.Conditions, condition(certificatesv1.CertificateDenied))
		})},
		{name: "failed", wantErr: "failed: Because", change: updateStatus(func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = append(c.Status.Conditions, condition(certificatesv1.CertificateApproved), condition(certificatesv1.CertificateFailed))
		})},
		{name: "deleted", wantErr: "deleted", change: func(t *testing.T, c api) {
			if err := c.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), req.name, metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		}},
		{name: "replaced by another of the same name", wantErr: "replaced", change: updateStatus(func(c *certificatesv1.CertificateSigningRequest) {
			c.UID = "second"
		})},
		{name: "nothing happens", wantErr: "deadline exceeded", change: func(*testing.T, api) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pending := csrObject(req)
			client := fake.NewClientset(pending)
			if tt.setup != nil {
				tt.setup(client)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			go func() {
				time.Sleep(50 * time.Millisecond) // usually after the waiter's first look
				tt.change(t, client)
			}()
			got, err := waitForCertificate(ctx, client.CertificatesV1().CertificateSigningRequests(), pending, 10*time.Millisecond)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("waitForCertificate = %v, want an error about %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != string(issued) {
				t.Fatalf("waitForCertificate = %d bytes, %v; want the issued certificate", len(got), err)
			}
		})
	}
}

// TestUsages: key encipherment is asked for RSA keys only, as the kubelet does.
func TestUsages(t *testing.T) {
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		usage func(any) []certificatesv1.KeyUsage
		key   crypto.Signer
		want  string
	}{
		{name: "client, ECDSA", usage: ClientUsages, key: ecKey, want: "digital signature,client auth"},
		{name: "client, RSA", usage: ClientUsages, key: rsaKey, want: "digital signature,key encipherment,client auth"},
		{name: "serving, ECDSA", usage: servingUsages, key: ecKey, want: "digital signature,server auth"},
		{name: "serving, RSA", usage: servingUsages, key: rsaKey, want: "digital signature,key encipherment,server auth"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, u := range tt.usage(tt.key) {
				got = append(got, string(u))
			}
			if strings.Join(got, ",") != tt.want {
				t.Errorf("usages %v, want %s", got, tt.want)
			}
		})
	}
}
