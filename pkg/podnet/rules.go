package podnet

import (
	"net"
	"slices"
)

// Comments of the agent's iptables rules. Each starts with "nodeagent:",
// so that a reader of iptables-save knows whose they are.
const (
	masqueradeComment = "nodeagent: masquerade pod traffic leaving the cluster"
	forwardComment    = "nodeagent: forward pod traffic"
)

// Rule is one iptables rule of the agent: the family (ip6tables when
// IPv6), table, chain and the rule's arguments.
type Rule struct {
	IPv6  bool     `json:"ipv6,omitempty"`
	Table string   `json:"table"`
	Chain string   `json:"chain"`
	Spec  []string `json:"spec"`
}

func (r Rule) equal(o Rule) bool {
	return r.IPv6 == o.IPv6 && r.Table == o.Table && r.Chain == o.Chain && slices.Equal(r.Spec, o.Spec)
}

// desiredRules are the rules for the node's pod CIDRs: traffic from this
// node's pods to anywhere outside the cluster CIDR of the family leaves
// with the node's address (pod-to-pod traffic across nodes keeps the pod's
// address), and the cluster CIDR may be forwarded even where the FORWARD
// chain's policy is DROP (as Docker sets it). A pod CIDR whose family has
// no cluster CIDR gets no rules.
func desiredRules(podCIDRs, clusterCIDRs []*net.IPNet) []Rule {
	var out []Rule
	for _, pod := range podCIDRs {
		v6 := pod.IP.To4() == nil
		cluster := sameFamily(clusterCIDRs, v6)
		if cluster == nil {
			continue
		}
		out = append(out,
			Rule{IPv6: v6, Table: "nat", Chain: "POSTROUTING", Spec: []string{
				"-s", pod.String(), "!", "-d", cluster.String(),
				"-m", "comment", "--comment", masqueradeComment, "-j", "MASQUERADE"}},
			Rule{IPv6: v6, Table: "filter", Chain: "FORWARD", Spec: []string{
				"-s", cluster.String(), "-m", "comment", "--comment", forwardComment, "-j", "ACCEPT"}},
			Rule{IPv6: v6, Table: "filter", Chain: "FORWARD", Spec: []string{
				"-d", cluster.String(), "-m", "comment", "--comment", forwardComment, "-j", "ACCEPT"}},
		)
	}
	return out
}

// sameFamily is the first CIDR of the family, or nil.
func sameFamily(cidrs []*net.IPNet, v6 bool) *net.IPNet {
	for _, c := range cidrs {
		if (c.IP.To4() == nil) == v6 {
			return c
		}
	}
	return nil
}

// staleRules are the rules of old that new no longer has.
func staleRules(old, new []Rule) []Rule {
	var out []Rule
	for _, o := range old {
		if !slices.ContainsFunc(new, o.equal) {
			out = append(out, o)
		}
	}
	return out
}

// unionRules is a followed by the rules of b it does not have.
func unionRules(a, b []Rule) []Rule {
	out := append([]Rule(nil), a...)
	for _, r := range b {
		if !slices.ContainsFunc(out, r.equal) {
			out = append(out, r)
		}
	}
	return out
}
