package main

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/certs"
	"github.com/nodeagent/nodeagent/pkg/kube"
)

// apiserverIdentity is how the agent authenticates to the apiserver: the
// REST configuration every client is built from and, with
// rotateCertificates, the rotation that must run beside the agent.
type apiserverIdentity struct {
	rest     *rest.Config
	rotation *certs.Client // nil without rotateCertificates
}

// newAPIServerIdentity bootstraps the client certificate when a bootstrap
// kubeconfig is given and the kubeconfig is missing or unusable (it
// blocks until the certificate is issued), then loads the kubeconfig,
// under rotation when rotateCertificates is on.
func newAPIServerIdentity(ctx context.Context, cfg *agentConfig) (*apiserverIdentity, error) {
	if cfg.bootstrapKubeconfig != "" {
		if _, err := certs.Bootstrap(ctx, certs.BootstrapConfig{
			Kubeconfig:          cfg.kubeconfig,
			BootstrapKubeconfig: cfg.bootstrapKubeconfig,
			CertDir:             cfg.certDir,
			NodeName:            cfg.nodeName,
		}); err != nil {
			return nil, fmt.Errorf("TLS bootstrap: %w", err)
		}
	}
	if !cfg.kubelet.RotateCertificates {
		restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", cfg.kubeconfig, err)
		}
		return &apiserverIdentity{rest: restCfg}, nil
	}
	rotation, err := certs.NewClient(ctx, certs.ClientConfig{
		Kubeconfig:          cfg.kubeconfig,
		BootstrapKubeconfig: cfg.bootstrapKubeconfig,
		CertDir:             cfg.certDir,
		NodeName:            cfg.nodeName,
	})
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Client certificate rotation is on", "certDir", cfg.certDir)
	return &apiserverIdentity{rest: rotation.RESTConfig(), rotation: rotation}, nil
}

// newServingCertificate is the node API's certificate from the
// kubelet-serving signer when serverTLSBootstrap is on, nil otherwise
// (tlsCertFile or a self-signed one, which pkg/server loads itself), and
// nil when enableServer is false: no node API, no certificate to request.
func newServingCertificate(ctx context.Context, cfg *agentConfig, client kube.Interface, addresses func() []v1.NodeAddress) (*certs.Serving, error) {
	if !cfg.kubelet.ServerTLSBootstrap || (cfg.kubelet.EnableServer != nil && !*cfg.kubelet.EnableServer) {
		return nil, nil
	}
	return certs.NewServing(ctx, certs.ServingConfig{
		Client:    client,
		CertDir:   cfg.certDir,
		NodeName:  cfg.nodeName,
		Addresses: addresses,
	})
}
