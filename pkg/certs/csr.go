package certs

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// csrPollInterval is how often a CSR is read while it cannot be watched.
const csrPollInterval = 2 * time.Second

// csrClient is what sending and waiting for a CSR needs of the
// certificates API.
type csrClient interface {
	Create(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, opts metav1.CreateOptions) (*certificatesv1.CertificateSigningRequest, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*certificatesv1.CertificateSigningRequest, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// csrRequest is a certificate signing request to send.
type csrRequest struct {
	// name is the CSR's name; empty means one the apiserver generates
	// ("csr-…", as the kubelet's renewals are named).
	name       string
	signerName string
	usages     []certificatesv1.KeyUsage
	// csrPEM is the PKCS#10 request, signed with key.
	csrPEM []byte
	key    crypto.Signer
}

// ClientUsages are the key usages the kubelet asks for in a client CSR:
// key encipherment only for RSA keys, whose TLS key exchange needs it.
func ClientUsages(key any) []certificatesv1.KeyUsage {
	if _, ok := key.(*rsa.PrivateKey); ok {
		return []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}
	}
	return []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
}

// servingUsages are ClientUsages' counterpart for a serving CSR.
func servingUsages(key any) []certificatesv1.KeyUsage {
	if _, ok := key.(*rsa.PrivateKey); ok {
		return []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}
	}
	return []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
}

func makeCSR(key crypto.Signer, tmpl *x509.CertificateRequest) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(nil, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate request: %w", err)
	}
	return pemEncode("CERTIFICATE REQUEST", der), nil
}

// csrName is node-csr-<digest of key, subject and usages>, the kubelet's
// scheme: the same request made twice gets the same name.
func csrName(pub crypto.PublicKey, subject pkix.Name, usages []certificatesv1.KeyUsage) (string, error) {
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("encode public key: %w", err)
	}
	h := sha512.New512_256()
	enc := base64.RawURLEncoding
	add := func(b []byte) {
		h.Write([]byte(enc.EncodeToString(b)))
		h.Write([]byte{'|'})
	}
	add(pubDER)
	add([]byte(subject.CommonName))
	for _, o := range subject.Organization {
		add([]byte(o))
	}
	for _, u := range usages {
		add([]byte(u))
	}
	return "node-csr-" + enc.EncodeToString(h.Sum(nil)), nil
}

// sendCSR creates the CSR. A named one that already exists (sent before
// a restart) is used instead when it is the same request: the same
// subject and key, the same signer, and no expired certificate in it.
// Errors from the apiserver are wrapped, not replaced, so that callers
// can tell its answers (apierrors) from a failure to reach it.
func sendCSR(ctx context.Context, csrs csrClient, req csrRequest) (*certificatesv1.CertificateSigningRequest, error) {
	obj := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: req.name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    req.csrPEM,
			SignerName: req.signerName,
			Usages:     req.usages,
		},
	}
	if req.name == "" {
		obj.GenerateName = "csr-"
	}
	created, err := csrs.Create(ctx, obj, metav1.CreateOptions{})
	if err == nil {
		return created, nil
	}
	if req.name == "" || !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create certificate signing request: %w", err)
	}
	existing, err := csrs.Get(ctx, req.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get existing certificate signing request %s: %w", req.name, err)
	}
	if err := sameRequest(existing, req, time.Now()); err != nil {
		return nil, fmt.Errorf("certificate signing request %s exists for another request: %w", req.name, err)
	}
	klog.FromContext(ctx).Info("Reusing the certificate signing request sent before", "csr", req.name)
	return existing, nil
}

// sameRequest says why an existing CSR is not req, or nil when it is.
func sameRequest(existing *certificatesv1.CertificateSigningRequest, req csrRequest, now time.Time) error {
	theirs, err := parseCSR(existing.Spec.Request)
	if err != nil {
		return err
	}
	ours, err := parseCSR(req.csrPEM)
	if err != nil {
		return err
	}
	switch {
	case !bytes.Equal(theirs.RawSubject, ours.RawSubject):
		return fmt.Errorf("subject %q, want %q", theirs.Subject, ours.Subject)
	case !publicKeysEqual(theirs.PublicKey, req.key.Public()):
		return errors.New("a different key")
	case existing.Spec.SignerName != "" && existing.Spec.SignerName != req.signerName:
		return fmt.Errorf("signer %q, want %q", existing.Spec.SignerName, req.signerName)
	}
	if len(existing.Status.Certificate) > 0 {
		certs, err := certutil.ParseCertsPEM(existing.Status.Certificate)
		if err != nil {
			return fmt.Errorf("issued certificate: %w", err)
		}
		for _, c := range certs {
			if now.After(c.NotAfter) {
				return fmt.Errorf("its certificate expired at %s", c.NotAfter.UTC().Format(time.RFC3339))
			}
		}
	}
	return nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}

func parseCSR(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("the request is not a PEM CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// errCSRPending: the CSR is neither issued nor refused yet.
var errCSRPending = errors.New("pending")

// csrCertificate reads a CSR's state: its certificate once approved and
// issued, an error when it was denied, failed or replaced by another of
// the same name (uid differs), errCSRPending otherwise.
func csrCertificate(csr *certificatesv1.CertificateSigningRequest, uid types.UID) ([]byte, error) {
	if uid != "" && csr.UID != uid {
		return nil, fmt.Errorf("certificate signing request %s was replaced (uid %s, want %s)", csr.Name, csr.UID, uid)
	}
	approved := false
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateDenied:
			return nil, fmt.Errorf("certificate signing request %s was denied: %s: %s", csr.Name, c.Reason, c.Message)
		case certificatesv1.CertificateFailed:
			return nil, fmt.Errorf("certificate signing request %s failed: %s: %s", csr.Name, c.Reason, c.Message)
		case certificatesv1.CertificateApproved:
			approved = true
		}
	}
	if approved && len(csr.Status.Certificate) > 0 {
		return csr.Status.Certificate, nil
	}
	return nil, errCSRPending
}

// waitForCertificate waits until the CSR is issued, refused or ctx ends.
// It watches the CSR; where the watch is refused it reads it every
// pollEvery instead. The watch is opened before the CSR is read, so no
// change falls between the two.
func waitForCertificate(ctx context.Context, csrs csrClient, csr *certificatesv1.CertificateSigningRequest, pollEvery time.Duration) ([]byte, error) {
	logger := klog.FromContext(ctx).WithValues("csr", csr.Name)
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", csr.Name).String()}
	polling := false
	for {
		var w watch.Interface
		if !polling {
			var err error
			if w, err = csrs.Watch(ctx, opts); err != nil {
				logger.V(2).Info("Cannot watch the certificate signing request; polling it", "err", err.Error())
				polling = true
			}
		}
		cert, err := getCertificate(ctx, csrs, csr)
		if err == nil || !errors.Is(err, errCSRPending) {
			if w != nil {
				w.Stop()
			}
			return cert, err
		}
		if w == nil {
			select {
			case <-ctx.Done():
				return nil, waitEnded(ctx)
			case <-time.After(pollEvery):
			}
			continue
		}
		cert, err = watchCertificate(ctx, w, csr)
		w.Stop()
		if !errors.Is(err, errCSRPending) {
			return cert, err
		}
		// The watch ended (the apiserver closes them after a while): again.
	}
}

// getCertificate reads the CSR once. A failed read is logged and counts
// as pending, but one that finds the CSR gone is an error.
func getCertificate(ctx context.Context, csrs csrClient, csr *certificatesv1.CertificateSigningRequest) ([]byte, error) {
	got, err := csrs.Get(ctx, csr.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("certificate signing request %s was deleted", csr.Name)
	case err != nil:
		if ctx.Err() != nil {
			return nil, waitEnded(ctx)
		}
		klog.FromContext(ctx).V(2).Info("Failed to read the certificate signing request", "csr", csr.Name, "err", err.Error())
		return nil, errCSRPending
	}
	return csrCertificate(got, csr.UID)
}

// watchCertificate follows the watch until the CSR is decided (a
// certificate or an error), ctx ends, or the watch does (errCSRPending).
func watchCertificate(ctx context.Context, w watch.Interface, csr *certificatesv1.CertificateSigningRequest) ([]byte, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, waitEnded(ctx)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, errCSRPending
			}
			got, isCSR := ev.Object.(*certificatesv1.CertificateSigningRequest)
			switch {
			case ev.Type == watch.Error:
				return nil, errCSRPending
			case !isCSR || got.Name != csr.Name:
				// Bookmarks; and the selector is a server's promise, not ours.
				continue
			case ev.Type == watch.Deleted:
				return nil, fmt.Errorf("certificate signing request %s was deleted", csr.Name)
			}
			if cert, err := csrCertificate(got, csr.UID); !errors.Is(err, errCSRPending) {
				return cert, err
			}
		}
	}
}

func waitEnded(ctx context.Context) error {
	return fmt.Errorf("no certificate yet: %w", context.Cause(ctx))
}
