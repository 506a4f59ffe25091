package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A certificate the harness issues from one of its CAs.
type certSpec struct {
	name   string // file stem under pki/
	cn     string
	orgs   []string
	server bool
	client bool
	dns    []string
	ips    []string
}

// The front-proxy CA and its one client certificate, named as kubeadm names them
// (cmd/kubeadm/app/phases/certs/certlist.go). The apiserver trusts this CA alone for the
// identities a front proxy asserts in X-Remote-* headers, and presents the client
// certificate when its aggregator proxies a request to an extension apiserver, which
// checks it against the CA and the allowed names it reads from the
// extension-apiserver-authentication ConfigMap. A CA of its own, as in kubeadm, so that no
// client certificate of the cluster CA can assert any user it likes.
const (
	frontProxyCA         = "front-proxy-ca"
	frontProxyClient     = "front-proxy-client"
	frontProxyClientName = "front-proxy-client" // its CN, the one --requestheader-allowed-names allows
)

// frontProxyCerts are the certificates the front-proxy CA issues.
var frontProxyCerts = []certSpec{{name: frontProxyClient, cn: frontProxyClientName, client: true}}

// clusterCerts are the identities of the harness, named as kubeadm names them.
func (c *Config) clusterCerts() []certSpec {
	certs := []certSpec{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain},
			ips: []string{"127.0.0.1", KubernetesSvc, NodeIP}},
		// As in kubeadm clusters: the apiserver's client identity towards nodes is bound to
		// cluster-admin through the kubeadm:cluster-admins group (see bootstrapRBAC).
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"kubeadm:cluster-admins"}, client: true},
		{name: "admin", cn: "kubernetes-super-admin", orgs: []string{"system:masters"}, client: true},
		{name: "controller-manager", cn: "system:kube-controller-manager", client: true},
		{name: "scheduler", cn: "system:kube-scheduler", client: true},
		{name: "node", cn: "system:node:" + NodeName, orgs: []string{"system:nodes"}, client: true},
		// The default RBAC binds system:node-proxier to this user.
		{name: "kube-proxy", cn: "system:kube-proxy", client: true},
	}
	for _, n := range c.Nodes()[1:] {
		certs = append(certs, certSpec{name: "node-" + n.tag(), cn: "system:node:" + n.Name, orgs: []string{"system:nodes"}, client: true})
	}
	return certs
}

// kubeconfigs maps each kubeconfig file to the certificate it carries.
var kubeconfigs = map[string]string{
	"admin.conf":              "admin",
	"controller-manager.conf": "controller-manager",
	"scheduler.conf":          "scheduler",
	"kubelet.conf":            "node",
	"kube-proxy.conf":         "kube-proxy",
}

// writePKI generates fresh CAs (the cluster's and the front proxy's), the certificates
// each issues, the service-account key pair and the kubeconfigs under pki/. Every file is
// written whole again, so that a run after one cut short never mixes its keys with the
// earlier run's.
func (c *Config) writePKI() error {
	dir := c.path("pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	for _, ca := range []struct {
		name, cn string
		certs    []certSpec
	}{
		{"ca", "nodeagent-harness-ca", c.clusterCerts()},
		{frontProxyCA, frontProxyCA, frontProxyCerts},
	} {
		if err := writeCA(dir, ca.name, ca.cn, now, ca.certs); err != nil {
			return fmt.Errorf("%s: %w", ca.name, err)
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return err
	}
	for file, cert := range kubeconfigs {
		if err := c.writeKubeconfig(filepath.Join(dir, file), cert); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes()[1:] {
		if err := c.writeKubeconfig(filepath.Join(dir, "kubelet-"+n.tag()+".conf"), "node-"+n.tag()); err != nil {
			return err
		}
	}
	return nil
}

// writeCA generates a self-signed CA valid from notBefore for a year, writes it as
// <name>.crt/.key under dir, and issues certs from it.
func writeCA(dir, name, cn string, notBefore time.Time, certs []certSpec) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore,
		NotAfter:              notBefore.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeCertKey(dir, name, caDER, caKey); err != nil {
		return err
	}
	for i, spec := range certs {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)),
			Subject:      pkix.Name{CommonName: spec.cn, Organization: spec.orgs},
			NotBefore:    notBefore,
			NotAfter:     notBefore.AddDate(1, 0, 0),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			DNSNames:     spec.dns,
		}
		for _, ip := range spec.ips {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
		}
		if spec.server {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		}
		if spec.client {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writeCertKey(dir, spec.name, der, key); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) writeKubeconfig(path, cert string) error {
	dir := c.path("pki")
	read := func(name string) []byte { b, _ := os.ReadFile(filepath.Join(dir, name)); return b }
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nodeagent"] = &clientcmdapi.Cluster{
		Server:                   APIServerURL(),
		CertificateAuthorityData: read("ca.crt"),
	}
	cfg.AuthInfos[cert] = &clientcmdapi.AuthInfo{ClientCertificateData: read(cert + ".crt"), ClientKeyData: read(cert + ".key")}
	cfg.Contexts["nodeagent"] = &clientcmdapi.Context{Cluster: "nodeagent", AuthInfo: cert}
	cfg.CurrentContext = "nodeagent"
	return clientcmd.WriteToFile(*cfg, path)
}

// APIServerURL is the apiserver's address: on the first node's IP, where every node
// reaches it.
func APIServerURL() string { return fmt.Sprintf("https://%s:%d", NodeIP, APIServerPort) }

func writeCertKey(dir, name string, der []byte, key crypto.Signer) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
