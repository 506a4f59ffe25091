package runtime

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DNSOptions is the node's DNS configuration.
type DNSOptions struct {
	// ClusterDNS are the cluster DNS servers (clusterDNS).
	ClusterDNS []string
	// ClusterDomain is the cluster's DNS domain (clusterDomain).
	ClusterDomain string
	// ResolvConf is the host resolver file for dnsPolicy Default; empty
	// means no host servers or searches.
	ResolvConf string
}

// clusterNdots is the ndots option of cluster-first pods, as the kubelet sets it.
const clusterNdots = "ndots:5"

// The resolver's limits (glibc's), which the kubelet enforces on what it
// hands the runtime: at most 3 nameservers, 32 search domains and 2048
// characters of search line.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
)

// Warning is something about a pod's configuration that the agent changed
// or could not honour; it becomes a Warning event with this reason.
type Warning struct {
	Reason  string
	Message string
}

// Reasons of the DNS warnings, as the kubelet names its events.
const (
	ReasonDNSConfigForming  = "DNSConfigForming"
	ReasonMissingClusterDNS = "MissingClusterDNS"
)

// DNSConfig computes a pod's resolver configuration from its dnsPolicy
// and dnsConfig, cut to the resolver's limits; the warnings say what was
// cut or which policy could not be honoured.
func DNSConfig(pod *v1.Pod, opts DNSOptions) (*runtimeapi.DNSConfig, []Warning, error) {
	var warnings []Warning
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	// ClusterFirst falls back to the host's resolver for host-network pods,
	// and to Default when no cluster DNS is configured.
	if policy == v1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = v1.DNSDefault
	}
	if policy == v1.DNSClusterFirstWithHostNet {
		policy = v1.DNSClusterFirst
	}
	if policy == v1.DNSClusterFirst && len(opts.ClusterDNS) == 0 {
		warnings = append(warnings, Warning{Reason: ReasonMissingClusterDNS, Message: fmt.Sprintf(
			"pod: %q. kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.",
			fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID), v1.DNSClusterFirst, v1.DNSDefault)})
		policy = v1.DNSDefault
	}
	cfg := &runtimeapi.DNSConfig{}
	switch policy {
	case v1.DNSNone:
	case v1.DNSClusterFirst:
		cfg.Servers = append([]string(nil), opts.ClusterDNS...)
		cfg.Searches = clusterSearches(pod.Namespace, opts.ClusterDomain)
		host, err := readResolvConf(opts.ResolvConf)
		if err != nil {
			return nil, nil, err
		}
		cfg.Searches = dedup(append(cfg.Searches, host.Searches...))
		cfg.Options = []string{clusterNdots}
	case v1.DNSDefault:
		host, err := readResolvConf(opts.ResolvConf)
		if err != nil {
			return nil, nil, err
		}
		cfg = host
	default:
		return nil, nil, fmt.Errorf("dnsPolicy %q is not supported", policy)
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		cfg.Servers = dedup(append(cfg.Servers, dc.Nameservers...))
		cfg.Searches = dedup(append(cfg.Searches, dc.Searches...))
		cfg.Options = mergeOptions(cfg.Options, dc.Options)
	}
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
		warnings = append(warnings, Warning{Reason: ReasonDNSConfigForming, Message: "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: " +
			strings.Join(cfg.Servers, " ")})
	}
	if searches, cut := fitSearches(cfg.Searches); cut {
		cfg.Searches = searches
		warnings = append(warnings, Warning{Reason: ReasonDNSConfigForming, Message: "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " +
			strings.Join(cfg.Searches, " ")})
	}
	return cfg, warnings, nil
}

// fitSearches keeps the first search domains that fit the resolver's
// limits on their number and on the length of the search line.
func fitSearches(searches []string) ([]string, bool) {
	cut := false
	if len(searches) > maxDNSSearchPaths {
		searches, cut = searches[:maxDNSSearchPaths], true
	}
	for len(searches) > 0 && len(strings.Join(searches, " ")) > maxDNSSearchListChars {
		searches, cut = searches[:len(searches)-1], true
	}
	return searches, cut
}

func clusterSearches(ns, domain string) []string {
	if domain == "" {
		return nil
	}
	return []string{ns + ".svc." + domain, "svc." + domain, domain}
}

// readResolvConf parses the servers, searches and options of a resolver
// file; an empty path yields an empty config.
func readResolvConf(path string) (*runtimeapi.DNSConfig, error) {
	cfg := &runtimeapi.DNSConfig{}
	if path == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read resolv.conf: %w", err)
	}
	return parseResolvConf(data), nil
}

func parseResolvConf(data []byte) *runtimeapi.DNSConfig {
	cfg := &runtimeapi.DNSConfig{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			cfg.Servers = append(cfg.Servers, f[1])
		case "search":
			cfg.Searches = f[1:]
		case "domain":
			cfg.Searches = []string{f[1]}
		case "options":
			cfg.Options = append(cfg.Options, f[1:]...)
		}
	}
	return cfg
}

func dedup(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// mergeOptions overrides options by name with the pod's own.
func mergeOptions(base []string, pod []v1.PodDNSConfigOption) []string {
	var names []string
	vals := map[string]string{}
	add := func(name, val string) {
		if _, ok := vals[name]; !ok {
			names = append(names, name)
		}
		vals[name] = val
	}
	for _, o := range base {
		name, val, _ := strings.Cut(o, ":")
		add(name, val)
	}
	for _, o := range pod {
		val := ""
		if o.Value != nil {
			val = *o.Value
		}
		add(o.Name, val)
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if vals[n] == "" {
			out = append(out, n)
		} else {
			out = append(out, n+":"+vals[n])
		}
	}
	return out
}
