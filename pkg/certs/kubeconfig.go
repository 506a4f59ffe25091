package certs

import (
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/transport"
	certutil "k8s.io/client-go/util/cert"
)

// errNoKubeconfig means the kubeconfig file does not exist.
var errNoKubeconfig = errors.New("does not exist")

// KubeconfigProblem says why the kubeconfig at path cannot be used to
// reach the apiserver as this node, or nil when it can: it is missing,
// unreadable, its client certificate or key does not load, or a
// certificate in it has expired. A kubeconfig without a client
// certificate (a token, say) is usable: the agent does not second-guess
// other credentials.
func KubeconfigProblem(path string, now time.Time) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return errNoKubeconfig
	} else if err != nil {
		return err
	}
	rc, err := loadRESTConfig(path)
	if err != nil {
		return fmt.Errorf("unreadable: %w", err)
	}
	tc, err := rc.TransportConfig()
	if err != nil {
		return fmt.Errorf("unreadable: %w", err)
	}
	// Loads the certificate and key files, and checks they match.
	if _, err := transport.TLSConfigFor(tc); err != nil {
		return fmt.Errorf("client certificate unusable: %w", err)
	}
	if !tc.HasCertAuth() {
		return nil
	}
	certs, err := certutil.ParseCertsPEM(tc.TLS.CertData)
	if err != nil {
		return fmt.Errorf("client certificate unusable: %w", err)
	}
	for _, c := range certs {
		if now.After(c.NotAfter) {
			return fmt.Errorf("client certificate %q expired at %s", c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

func pemEncode(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
