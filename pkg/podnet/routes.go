package podnet

import (
	"net"
	"sort"

	v1 "k8s.io/api/core/v1"
)

// RouteProtocol marks the routes the agent makes (rtnetlink's rtm_protocol).
// The kernel keeps it with the route and never interprets it; the agent
// lists and deletes only routes that carry it, so that after a restart it
// finds the routes it made (and those of Nodes deleted meanwhile) and never
// touches anyone else's. 157 is none of the values iproute2 names in
// rt_protos (kernel, boot, static, dhcp, bird, zebra, bgp, ...).
const RouteProtocol = 157

// Route is a route to another node's pods: its pod CIDR via its address.
type Route struct {
	Dst *net.IPNet
	Gw  net.IP
}

func (r Route) key() string { return r.Dst.String() }

// TableRoute is an existing route the table reports: its destination, its
// gateway and whether the agent made it (its protocol is RouteProtocol).
type TableRoute struct {
	Route
	Ours bool
}

// desiredRoutes are the routes to the pods of every other node: each pod
// CIDR of a Node with an InternalIP of the same family, via that address.
// Nodes without a pod CIDR or such an address have no route yet; CIDRs
// that do not parse are skipped.
func desiredRoutes(self string, nodes []*v1.Node) []Route {
	var out []Route
	for _, n := range nodes {
		if n.Name == self {
			continue
		}
		for _, s := range podCIDRsOf(n) {
			_, cidr, err := net.ParseCIDR(s)
			if err != nil {
				continue
			}
			gw := internalIP(n, cidr.IP.To4() != nil)
			if gw == nil {
				continue
			}
			out = append(out, Route{Dst: cidr, Gw: gw})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// podCIDRsOf is spec.podCIDRs, or spec.podCIDR on a Node written before
// the list existed.
func podCIDRsOf(n *v1.Node) []string {
	if len(n.Spec.PodCIDRs) > 0 {
		return n.Spec.PodCIDRs
	}
	if n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return nil
}

// internalIP is the Node's first InternalIP of the family.
func internalIP(n *v1.Node, v4 bool) net.IP {
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP {
			continue
		}
		ip := net.ParseIP(a.Address)
		if ip != nil && (ip.To4() != nil) == v4 {
			return ip
		}
	}
	return nil
}

// routePlan is what to do to the routing table.
type routePlan struct {
	// replace are routes to add, or to point at a new gateway.
	replace []Route
	// remove are routes of the agent's that no node wants any more.
	remove []Route
	// conflicts are wanted routes whose destination already has a route
	// the agent did not make; they are left alone.
	conflicts []Route
}

// planRoutes compares the wanted routes with those in the table.
func planRoutes(want []Route, have []TableRoute) routePlan {
	var p routePlan
	ours := map[string]Route{}
	foreign := map[string]bool{}
	for _, h := range have {
		if h.Ours {
			ours[h.key()] = h.Route
		} else {
			foreign[h.key()] = true
		}
	}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w.key()] = true
		cur, mine := ours[w.key()]
		switch {
		case mine && cur.Gw.Equal(w.Gw):
		case !mine && foreign[w.key()]:
			p.conflicts = append(p.conflicts, w)
		default:
			p.replace = append(p.replace, w)
		}
	}
	for _, h := range have {
		if h.Ours && !wanted[h.key()] {
			p.remove = append(p.remove, h.Route)
		}
	}
	return p
}
