package harness

import "context"

// serviceSteps are the steps of Up that give the cluster Services and DNS, when
// Config.Services asks for them: kube-proxy on the node, then CoreDNS, whose readiness
// needs the kubernetes Service that kube-proxy routes.
func (c *Config) serviceSteps(upstreamBin string) []struct {
	name string
	do   func(context.Context) error
} {
	if !c.Services {
		return nil
	}
	return []struct {
		name string
		do   func(context.Context) error
	}{
		{"kube-proxy", func(ctx context.Context) error { return c.startKubeProxy(ctx, upstreamBin) }},
		{"CoreDNS", c.deployCoreDNS},
	}
}
