package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// ServingConfig configures the serving certificate of the node API
// (serverTLSBootstrap).
type ServingConfig struct {
	// Client sends the CSRs, as the node. Required.
	Client kube.Interface
	// CertDir holds kubelet-server-*.pem. Required.
	CertDir string
	// NodeName is the node the certificate is for. Required.
	NodeName string
	// Addresses are the node's addresses as its status reports them; the
	// certificate names each of them. Until one is an IP, no CSR is sent
	// (the kubelet-serving signer refuses a certificate without one).
	// Required.
	Addresses func() []v1.NodeAddress
}

// Serving is the node API's serving certificate, requested from the
// kubernetes.io/kubelet-serving signer and renewed like the client one;
// a change of the node's addresses requests a new one. Its CSRs are not
// approved by the controller-manager: a cluster admin or an approver
// does it.
type Serving struct {
	rotator *rotator
}

// NewServing loads the current serving pair, if any, and builds the
// rotator; nothing is sent until Run.
func NewServing(ctx context.Context, cfg ServingConfig) (*Serving, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("certs: serving certificates need an apiserver client")
	case cfg.CertDir == "":
		return nil, errors.New("certs: a cert dir is required")
	case cfg.NodeName == "":
		return nil, errors.New("certs: a node name is required")
	case cfg.Addresses == nil:
		return nil, errors.New("certs: the node's addresses are required")
	}
	m, err := newRotator(klog.FromContext(ctx), rotatorConfig{
		Name:       "serving",
		Store:      newPairStore(cfg.CertDir, servingPrefix, "", ""),
		Client:     func(*tls.Certificate) (kube.Interface, error) { return cfg.Client, nil },
		Template:   func() *x509.CertificateRequest { return servingTemplate(cfg.NodeName, cfg.Addresses()) },
		Dynamic:    true,
		SignerName: certificatesv1.KubeletServingSignerName,
		Usages:     servingUsages,
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate rotation: %w", err)
	}
	return &Serving{rotator: m}, nil
}

// Current is the serving certificate, nil until one is issued or when it
// expired.
func (s *Serving) Current() *tls.Certificate { return s.rotator.Current() }

// Run requests and renews the certificate until ctx ends.
func (s *Serving) Run(ctx context.Context) error {
	s.rotator.Run(ctx)
	return nil
}

// servingTemplate is the CSR for the node's names and IPs, sorted and
// without duplicates so that an unchanged set is an unchanged template;
// nil while the node has no IP address.
func servingTemplate(nodeName string, addrs []v1.NodeAddress) *x509.CertificateRequest {
	var dns []string
	var ips []net.IP
	addIP := func(ip net.IP) {
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	for _, a := range addrs {
		if a.Address == "" {
			continue
		}
		ip := net.ParseIP(a.Address)
		switch a.Type {
		case v1.NodeHostName:
			if ip != nil {
				addIP(ip)
			} else if !slices.Contains(dns, a.Address) {
				dns = append(dns, a.Address)
			}
		case v1.NodeInternalIP, v1.NodeExternalIP:
			if ip != nil {
				addIP(ip)
			}
		case v1.NodeInternalDNS, v1.NodeExternalDNS:
			if !slices.Contains(dns, a.Address) {
				dns = append(dns, a.Address)
			}
		}
	}
	if len(ips) == 0 {
		return nil
	}
	slices.Sort(dns)
	slices.SortFunc(ips, func(a, b net.IP) int { return strings.Compare(a.String(), b.String()) })
	return &x509.CertificateRequest{Subject: nodeSubject(nodeName), DNSNames: dns, IPAddresses: ips}
}
