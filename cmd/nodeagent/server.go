package main

import (
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/pkg/server"
)

// newNodeServer builds the node's HTTPS API (port 10250) from the configuration: the
// serving certificate, authentication and authorization as kubelet users configure them.
func newNodeServer(cfg *agentConfig, client kubernetes.Interface, rt server.RuntimeService, pods server.PodLister) (*server.Server, error) {
	kc := cfg.kubelet
	return server.New(server.Config{
		Address:                        kc.Address,
		Port:                           kc.Port,
		NodeName:                       cfg.nodeName,
		NodeIPs:                        cfg.nodeIPs,
		TLSCertFile:                    kc.TLSCertFile,
		TLSPrivateKeyFile:              kc.TLSPrivateKeyFile,
		CertDir:                        cfg.certDir,
		TLSMinVersion:                  kc.TLSMinVersion,
		TLSCipherSuites:                kc.TLSCipherSuites,
		ClientCAFile:                   kc.Authentication.X509.ClientCAFile,
		AnonymousEnabled:               *kc.Authentication.Anonymous.Enabled,
		WebhookAuthenticationEnabled:   *kc.Authentication.Webhook.Enabled,
		TokenCacheTTL:                  kc.Authentication.Webhook.CacheTTL.Duration,
		AuthorizationMode:              string(kc.Authorization.Mode),
		AuthorizedCacheTTL:             kc.Authorization.Webhook.CacheAuthorizedTTL.Duration,
		UnauthorizedCacheTTL:           kc.Authorization.Webhook.CacheUnauthorizedTTL.Duration,
		Client:                         client,
		Runtime:                        rt,
		Pods:                           pods,
		StreamingConnectionIdleTimeout: kc.StreamingConnectionIdleTimeout.Duration,
		RuntimeRequestTimeout:          kc.RuntimeRequestTimeout.Duration,
	})
}
