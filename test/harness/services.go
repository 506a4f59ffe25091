package harness

import "context"

// serviceSteps are the steps of Up that give the cluster Services and DNS, when
// Config.Services asks for them: kube-proxy on every node, then CoreDNS, whose readiness
// needs the kubernetes Service that kube-proxy routes.
func (c *Config) serviceSteps(upstreamBin string) []upStep {
	if !c.Services {
		return nil
	}
	var steps []upStep
	for _, n := range c.Nodes() {
		steps = append(steps, upStep{"kube-proxy on " + n.Name, func(ctx context.Context) error { return c.startKubeProxy(ctx, n, upstreamBin) }})
	}
	return append(steps, upStep{"CoreDNS", c.deployCoreDNS})
}
