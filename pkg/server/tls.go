package server

import (
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
	"path/filepath"
	"time"

	"github.com/nodeagent/nodeagent/pkg/atomicfile"
	"github.com/nodeagent/nodeagent/pkg/certs"
)

// Names of the self-signed serving pair in the cert dir, as the kubelet
// names them, so that tools and docs written for the kubelet find them.
const (
	selfSignedCertName = "kubelet.crt"
	selfSignedKeyName  = "kubelet.key"
	selfSignedValidity = 365 * 24 * time.Hour
)

var tlsVersions = map[string]uint16{
	"VersionTLS10": tls.VersionTLS10,
	"VersionTLS11": tls.VersionTLS11,
	"VersionTLS12": tls.VersionTLS12,
	"VersionTLS13": tls.VersionTLS13,
}

// CertificateSource hands out the serving certificate in use; it may
// change at any time. pkg/certs' serving manager and file reloader are
// ones.
type CertificateSource interface {
	Current() *tls.Certificate
}

// errNoServingCertificate fails a handshake while a requested serving
// certificate has not been issued yet.
var errNoServingCertificate = errors.New("no serving certificate available for the node API yet")

// servingTLSConfig builds the listener's TLS settings from cfg. The
// certificate is read from its source at every handshake, so a rotated
// or rewritten one is used without a restart. A certificate from files
// comes with the reloader that Run must run.
func servingTLSConfig(cfg Config) (*tls.Config, *certs.KeyPairFiles, error) {
	minVersion := uint16(tls.VersionTLS12)
	if cfg.TLSMinVersion != "" {
		v, ok := tlsVersions[cfg.TLSMinVersion]
		if !ok {
			return nil, nil, fmt.Errorf("tlsMinVersion %q is not one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13", cfg.TLSMinVersion)
		}
		minVersion = v
	}
	suites, err := cipherSuites(cfg.TLSCipherSuites)
	if err != nil {
		return nil, nil, err
	}
	if minVersion == tls.VersionTLS13 && len(suites) > 0 {
		return nil, nil, errors.New("tlsCipherSuites cannot be set with tlsMinVersion VersionTLS13: TLS 1.3 suites are not configurable")
	}
	source := cfg.ServingCertificate
	var files *certs.KeyPairFiles
	if source == nil {
		certFile, keyFile := cfg.TLSCertFile, cfg.TLSPrivateKeyFile
		if (certFile == "") != (keyFile == "") {
			return nil, nil, errors.New("tlsCertFile and tlsPrivateKeyFile must be set together")
		}
		if certFile == "" {
			if certFile, keyFile, err = ensureSelfSignedCert(cfg.CertDir, cfg.NodeName, cfg.NodeIPs, time.Now()); err != nil {
				return nil, nil, err
			}
		}
		if files, err = certs.NewKeyPairFiles(certFile, keyFile); err != nil {
			return nil, nil, fmt.Errorf("load serving certificate %s: %w", certFile, err)
		}
		source = files
	}
	return &tls.Config{
		MinVersion:   minVersion,
		CipherSuites: suites,
		// What http.Server.ServeTLS would offer; spelled out because a
		// config handed out per connection (a reloaded client CA) is
		// used as it is.
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if cur := source.Current(); cur != nil {
				return cur, nil
			}
			return nil, errNoServingCertificate
		},
	}, files, nil
}

// cipherSuites maps IANA names to Go's IDs. Insecure suites are accepted
// because the kubelet accepts them; choosing them is the operator's call.
func cipherSuites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return nil, nil
	}
	known := map[string]uint16{}
	for _, s := range tls.CipherSuites() {
		known[s.Name] = s.ID
	}
	for _, s := range tls.InsecureCipherSuites() {
		known[s.Name] = s.ID
	}
	ids := make([]uint16, 0, len(names))
	for _, n := range names {
		id, ok := known[n]
		if !ok {
			return nil, fmt.Errorf("tlsCipherSuites: unknown cipher suite %q", n)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// ensureSelfSignedCert returns the self-signed pair in dir, creating it when
// it is missing. An existing pair is kept even when expired or for other
// names: the operator may have put it there.
func ensureSelfSignedCert(dir, nodeName string, ips []net.IP, now time.Time) (certFile, keyFile string, err error) {
	if dir == "" {
		return "", "", errors.New("no tlsCertFile/tlsPrivateKeyFile and no cert dir to keep a self-signed certificate in")
	}
	certFile = filepath.Join(dir, selfSignedCertName)
	keyFile = filepath.Join(dir, selfSignedKeyName)
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	if certErr == nil && keyErr == nil {
		return certFile, keyFile, nil
	}
	certPEM, keyPEM, err := selfSignedCert(nodeName, ips, now)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("create cert dir: %w", err)
	}
	if err := atomicfile.Write(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := atomicfile.Write(certFile, certPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// selfSignedCert makes a serving certificate for the node name and IPs that
// is its own CA, so a client can pin it as a trust root.
func selfSignedCert(nodeName string, ips []net.IP, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("generate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", nodeName, now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if ip := net.ParseIP(nodeName); ip != nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	} else {
		tmpl.DNSNames = append(tmpl.DNSNames, nodeName)
	}
	tmpl.IPAddresses = append(tmpl.IPAddresses, ips...)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode serving key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}
