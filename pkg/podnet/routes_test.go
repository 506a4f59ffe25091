package podnet

import (
	"net"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testNode is a Node with pod CIDRs and addresses given as "InternalIP=1.2.3.4".
func testNode(name string, podCIDRs []string, addrs ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{PodCIDRs: podCIDRs}}
	if len(podCIDRs) > 0 {
		n.Spec.PodCIDR = podCIDRs[0]
	}
	for _, a := range addrs {
		for i := range a {
			if a[i] == '=' {
				n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeAddressType(a[:i]), Address: a[i+1:]})
			}
		}
	}
	return n
}

func route(dst, gw string) Route {
	_, cidr, err := net.ParseCIDR(dst)
	if err != nil {
		panic(err)
	}
	return Route{Dst: cidr, Gw: net.ParseIP(gw)}
}

func routeStrings(rs []Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Dst.String()+" via "+r.Gw.String())
	}
	return out
}

func TestDesiredRoutes(t *testing.T) {
	nodes := []*v1.Node{
		testNode("self", []string{"10.244.0.0/24"}, "InternalIP=192.168.0.1"),
		testNode("b", []string{"10.244.1.0/24"}, "ExternalIP=203.0.113.2", "InternalIP=192.168.0.2"),
		testNode("dual", []string{"10.244.2.0/24", "fd00:10:244:2::/64"}, "InternalIP=192.168.0.3", "InternalIP=fd00::3"),
		testNode("v4-address-only", []string{"10.244.3.0/24", "fd00:10:244:3::/64"}, "InternalIP=192.168.0.4"),
		testNode("no-cidr", nil, "InternalIP=192.168.0.5"),
		testNode("external-only", []string{"10.244.6.0/24"}, "ExternalIP=203.0.113.6"),
		testNode("bad-cidr", []string{"10.244.7.0"}, "InternalIP=192.168.0.7"),
	}
	// A Node written before spec.podCIDRs existed.
	old := testNode("old", nil, "InternalIP=192.168.0.8")
	old.Spec.PodCIDR = "10.244.8.0/24"
	nodes = append(nodes, old)

	got := routeStrings(desiredRoutes("self", nodes))
	want := []string{
		"10.244.1.0/24 via 192.168.0.2",
		"10.244.2.0/24 via 192.168.0.3",
		"10.244.3.0/24 via 192.168.0.4",
		"10.244.8.0/24 via 192.168.0.8",
		"fd00:10:244:2::/64 via fd00::3",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("desiredRoutes =\n%v\nwant\n%v", got, want)
	}
}

func TestPlanRoutes(t *testing.T) {
	ours := func(r Route) TableRoute { return TableRoute{Route: r, Ours: true} }
	foreign := func(r Route) TableRoute { return TableRoute{Route: r} }
	tests := []struct {
		name                       string
		want                       []Route
		have                       []TableRoute
		replace, remove, conflicts []string
	}{
		{
			name:    "new routes are added",
			want:    []Route{route("10.244.1.0/24", "192.168.0.2")},
			replace: []string{"10.244.1.0/24 via 192.168.0.2"},
		},
		{
			name: "routes in place: nothing to do",
			want: []Route{route("10.244.1.0/24", "192.168.0.2")},
			have: []TableRoute{ours(route("10.244.1.0/24", "192.168.0.2"))},
		},
		{
			name:    "a node's new address changes its route",
			want:    []Route{route("10.244.1.0/24", "192.168.0.22")},
			have:    []TableRoute{ours(route("10.244.1.0/24", "192.168.0.2"))},
			replace: []string{"10.244.1.0/24 via 192.168.0.22"},
		},
		{
			name:   "the route of a node that is gone is removed",
			have:   []TableRoute{ours(route("10.244.1.0/24", "192.168.0.2"))},
			remove: []string{"10.244.1.0/24 via 192.168.0.2"},
		},
		{
			name: "others' routes are never removed",
			have: []TableRoute{foreign(route("10.244.1.0/24", "192.168.0.2")), foreign(route("0.0.0.0/0", "192.168.0.254"))},
		},
		{
			name:      "a destination someone else routes is left to them",
			want:      []Route{route("10.244.1.0/24", "192.168.0.2")},
			have:      []TableRoute{foreign(route("10.244.1.0/24", "10.0.0.1"))},
			conflicts: []string{"10.244.1.0/24 via 192.168.0.2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := planRoutes(tt.want, tt.have)
			if got := routeStrings(p.replace); !reflect.DeepEqual(got, tt.replace) {
				t.Errorf("replace = %v, want %v", got, tt.replace)
			}
			if got := routeStrings(p.remove); !reflect.DeepEqual(got, tt.remove) {
				t.Errorf("remove = %v, want %v", got, tt.remove)
			}
			if got := routeStrings(p.conflicts); !reflect.DeepEqual(got, tt.conflicts) {
				t.Errorf("conflicts = %v, want %v", got, tt.conflicts)
			}
		})
	}
}

func TestDesiredRules(t *testing.T) {
	cluster, err := ParseClusterCIDRs("10.244.0.0/16,fd00:10:244::/56")
	if err != nil {
		t.Fatal(err)
	}
	rules := desiredRules(mustCIDRs(t, "10.244.1.0/24", "fd00:10:244:1::/64"), cluster)
	var masq []Rule
	for _, r := range rules {
		if r.Table == "nat" {
			masq = append(masq, r)
		}
	}
	want := []Rule{
		{Table: "nat", Chain: "POSTROUTING", Spec: []string{"-s", "10.244.1.0/24", "!", "-d", "10.244.0.0/16", "-m", "comment", "--comment", masqueradeComment, "-j", "MASQUERADE"}},
		{IPv6: true, Table: "nat", Chain: "POSTROUTING", Spec: []string{"-s", "fd00:10:244:1::/64", "!", "-d", "fd00:10:244::/56", "-m", "comment", "--comment", masqueradeComment, "-j", "MASQUERADE"}},
	}
	if !reflect.DeepEqual(masq, want) {
		t.Errorf("masquerade rules = %+v", masq)
	}
	// A family without a cluster CIDR gets no rules.
	if got := desiredRules(mustCIDRs(t, "fd00:10:244:1::/64"), cluster[:1]); len(got) != 0 {
		t.Errorf("rules for a family without cluster CIDR: %+v", got)
	}
	if got := staleRules(rules, rules[:1]); len(got) != len(rules)-1 {
		t.Errorf("staleRules = %v", got)
	}
}
