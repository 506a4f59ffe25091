// Package certs owns the node's certificates: the TLS bootstrap of the
// client certificate from a bootstrap kubeconfig, its rotation through
// the certificates API with every apiserver connection moved to the new
// one, the serving certificate of the node API (requested from the
// kubelet-serving signer, or read from files that are reloaded when they
// change), and the client CA bundle the node API trusts.
//
// Files are laid out as the kubelet lays them out, because kubeadm and
// operators' tools read them: <certDir>/kubelet-client-<timestamp>.pem
// (certificate and key in one file, mode 0600) with the symlink
// kubelet-client-current.pem, the same for kubelet-server, and a
// kubeconfig whose client-certificate and client-key both name the
// current.pem symlink. store.go writes them.
package certs

import (
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// Names of the pairs in the cert dir, the kubelet's.
const (
	clientPrefix  = "kubelet-client"
	servingPrefix = "kubelet-server"
	// bootstrapKeyFile keeps the key of a bootstrap CSR across restarts, so
	// a CSR approved while the agent was down still matches its key.
	bootstrapKeyFile = "kubelet-client.key.tmp"
)

// defaultBootstrapTimeout is how long a bootstrap CSR is waited for, the
// kubelet's hour: approval may be a human's job.
const defaultBootstrapTimeout = time.Hour

// BootstrapConfig says where the credentials are and who the node is.
type BootstrapConfig struct {
	// Kubeconfig is --kubeconfig: used as it is when its client
	// certificate is usable, written when the agent bootstraps. Required.
	Kubeconfig string
	// BootstrapKubeconfig is --bootstrap-kubeconfig: the credentials a
	// CSR is sent with. Required.
	BootstrapKubeconfig string
	// CertDir holds the certificate pairs. Required.
	CertDir string
	// NodeName is the node the certificate is for. Required.
	NodeName string
	// Timeout bounds the wait for approval and issuance; 0 means 1h.
	Timeout time.Duration
	// NewClient builds the client a CSR is sent with from the bootstrap
	// credentials; nil means kube.NewForConfig. Tests give a fake.
	NewClient func(*rest.Config) (kube.Interface, error)
}

func (c *BootstrapConfig) validate() error {
	switch {
	case c.Kubeconfig == "":
		return errors.New("certs: a kubeconfig path is required")
	case c.BootstrapKubeconfig == "":
		return errors.New("certs: a bootstrap kubeconfig is required")
	case c.CertDir == "":
		return errors.New("certs: a cert dir is required")
	case c.NodeName == "":
		return errors.New("certs: a node name is required")
	}
	if c.Timeout == 0 {
		c.Timeout = defaultBootstrapTimeout
	}
	if c.NewClient == nil {
		c.NewClient = newKubeClient
	}
	return nil
}

// Bootstrap makes sure the kubeconfig holds a usable client certificate.
// When it does, nothing happens. Otherwise it requests a certificate for
// system:node:<name> from the kube-apiserver-client-kubelet signer with
// the bootstrap kubeconfig's credentials, waits until it is issued,
// stores it in the cert dir and writes the kubeconfig pointing at it.
// It reports whether it requested a certificate.
func Bootstrap(ctx context.Context, cfg BootstrapConfig) (bool, error) {
	if err := cfg.validate(); err != nil {
		return false, err
	}
	logger := klog.FromContext(ctx)
	problem := KubeconfigProblem(cfg.Kubeconfig, time.Now())
	if problem == nil {
		return false, nil
	}
	logger.Info("Requesting a client certificate with the bootstrap kubeconfig",
		"reason", problem.Error(), "bootstrapKubeconfig", cfg.BootstrapKubeconfig)
	bootstrapCfg, err := loadRESTConfig(cfg.BootstrapKubeconfig)
	if err != nil {
		return false, fmt.Errorf("load bootstrap kubeconfig: %w", err)
	}
	client, err := cfg.NewClient(bootstrapCfg)
	if err != nil {
		return false, fmt.Errorf("build bootstrap client: %w", err)
	}
	store := newPairStore(cfg.CertDir, clientPrefix, "", "")
	keyPEM, err := bootstrapKey(logger, store, cfg.CertDir, time.Now())
	if err != nil {
		return false, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	certPEM, err := requestClientCertificate(waitCtx, client, keyPEM, cfg.NodeName)
	if err != nil {
		return false, err
	}
	if _, err := store.update(certPEM, keyPEM, time.Now()); err != nil {
		return false, fmt.Errorf("store client certificate: %w", err)
	}
	if err := os.Remove(filepath.Join(cfg.CertDir, bootstrapKeyFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		logger.V(2).Info("Failed to remove the bootstrap key", "err", err.Error())
	}
	if err := writeKubeconfig(cfg.Kubeconfig, bootstrapCfg, store.currentPath()); err != nil {
		return false, err
	}
	logger.Info("Client certificate issued", "path", store.currentPath(), "kubeconfig", cfg.Kubeconfig)
	return true, nil
}

// bootstrapKey is the key to request with: the current pair's while its
// certificate is still valid (only the kubeconfig was lost), else the
// one kept from an earlier attempt, else a new one. The kubelet reuses an
// expired pair's key too; but the same key and subject name the same
// CSR, and the old one, issued and expired, is still there until the
// CSR cleaner's hourly pass, so the request would be refused.
func bootstrapKey(logger klog.Logger, store *pairStore, certDir string, now time.Time) ([]byte, error) {
	if cur := store.load(logger); cur != nil && now.Before(cur.Leaf.NotAfter) {
		if data, err := keyutil.MarshalPrivateKeyToPEM(cur.PrivateKey); err == nil {
			return data, nil
		}
	}
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return nil, fmt.Errorf("create cert dir: %w", err)
	}
	data, _, err := keyutil.LoadOrGenerateKeyFile(filepath.Join(certDir, bootstrapKeyFile))
	if err != nil {
		return nil, fmt.Errorf("bootstrap key: %w", err)
	}
	return data, nil
}

// requestClientCertificate sends the node's client CSR and waits for the
// certificate. The CSR's name is derived from the key and subject, so a
// restart with the same key finds its earlier request instead of sending
// another.
func requestClientCertificate(ctx context.Context, client kube.Interface, keyPEM []byte, nodeName string) ([]byte, error) {
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parse bootstrap key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("bootstrap key cannot sign")
	}
	subject := nodeSubject(nodeName)
	csrPEM, err := makeCSR(signer, &x509.CertificateRequest{Subject: subject})
	if err != nil {
		return nil, err
	}
	usages := ClientUsages(key)
	name, err := csrName(signer.Public(), subject, usages)
	if err != nil {
		return nil, err
	}
	csrs := client.CertificatesV1().CertificateSigningRequests()
	csr, err := sendCSR(ctx, csrs, csrRequest{
		name: name, signerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		usages: usages, csrPEM: csrPEM, key: signer,
	})
	if err != nil {
		return nil, fmt.Errorf("send certificate signing request: %w", err)
	}
	klog.FromContext(ctx).Info("Waiting for the client certificate to be approved and issued", "csr", csr.Name)
	data, err := waitForCertificate(ctx, csrs, csr, csrPollInterval)
	if err != nil {
		return nil, fmt.Errorf("wait for certificate signing request %s: %w", csr.Name, err)
	}
	return data, nil
}

// newKubeClient is the default NewClient: kube.NewForConfig, whose
// typed nil on an error must not become a non-nil Interface.
func newKubeClient(rc *rest.Config) (kube.Interface, error) {
	c, err := kube.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// nodeSubject is the identity the Node authorizer and NodeRestriction
// recognise.
func nodeSubject(nodeName string) pkix.Name {
	return pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}
}

// writeKubeconfig writes the kubeconfig a bootstrapped node uses: the
// bootstrap kubeconfig's server and CA, and the current pair for both
// the client certificate and key. clientcmd writes it with mode 0600.
func writeKubeconfig(path string, bootstrap *rest.Config, pemPath string) error {
	cluster := &clientcmdapi.Cluster{
		Server:                bootstrap.Host,
		InsecureSkipTLSVerify: bootstrap.Insecure,
		CertificateAuthority:  bootstrap.CAFile,
		TLSServerName:         bootstrap.ServerName,
	}
	if bootstrap.CAFile == "" {
		cluster.CertificateAuthorityData = bootstrap.CAData
	}
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"default-cluster": cluster},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"default-auth": {ClientCertificate: pemPath, ClientKey: pemPath}},
		Contexts:       map[string]*clientcmdapi.Context{"default-context": {Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default"}},
		CurrentContext: "default-context",
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := clientcmd.WriteToFile(kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// loadRESTConfig reads a kubeconfig's current context.
func loadRESTConfig(path string) (*rest.Config, error) {
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, err
	}
	return rc, nil
}
