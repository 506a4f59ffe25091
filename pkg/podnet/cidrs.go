package podnet

import (
	"fmt"
	"net"
	"strings"
)

// ParseClusterCIDRs parses --cluster-cidr: comma-separated CIDRs, at most
// one per family.
func ParseClusterCIDRs(s string) ([]*net.IPNet, error) {
	var items []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("no CIDR given")
	}
	return parseCIDRs(items)
}

// ParsePodCIDRs parses a Node's spec.podCIDRs: at most one per family.
func ParsePodCIDRs(items []string) ([]*net.IPNet, error) {
	return parseCIDRs(items)
}

func parseCIDRs(items []string) ([]*net.IPNet, error) {
	if len(items) > 2 {
		return nil, fmt.Errorf("at most two CIDRs (one per IP family), got %d", len(items))
	}
	var out []*net.IPNet
	for _, item := range items {
		ip, cidr, err := net.ParseCIDR(item)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR", item)
		}
		if !ip.Equal(cidr.IP) {
			return nil, fmt.Errorf("%q has host bits set (the network is %s)", item, cidr)
		}
		if len(out) == 1 && (out[0].IP.To4() == nil) == (cidr.IP.To4() == nil) {
			return nil, fmt.Errorf("two CIDRs must be one IPv4 and one IPv6, got %s", strings.Join(items, ","))
		}
		out = append(out, cidr)
	}
	return out, nil
}
