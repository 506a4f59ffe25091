package podnet

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// fakeKernel records what the pod network does to the machine.
type fakeKernel struct {
	mu         sync.Mutex
	routes     *fakeRoutes
	rules      map[bool]*fakeRules
	forwarding map[bool]bool
	bridges    []string // deleted
	calls      []string
	rulesErr   error
}

func newFakeKernel() *fakeKernel {
	return &fakeKernel{routes: &fakeRoutes{}, rules: map[bool]*fakeRules{false: {}, true: {}}, forwarding: map[bool]bool{}}
}

func (k *fakeKernel) record(s string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, s)
}

func (k *fakeKernel) Routes() RouteTable { k.record("routes"); return k.routes }

func (k *fakeKernel) Rules(ipv6 bool) (RuleTable, error) {
	k.record(fmt.Sprintf("rules ipv6=%t", ipv6))
	if k.rulesErr != nil {
		return nil, k.rulesErr
	}
	return k.rules[ipv6], nil
}

func (k *fakeKernel) EnableForwarding(ipv6 bool) error {
	k.record(fmt.Sprintf("forwarding ipv6=%t", ipv6))
	k.forwarding[ipv6] = true
	return nil
}

func (k *fakeKernel) DeleteBridge(name string) error {
	k.record("delete bridge " + name)
	k.bridges = append(k.bridges, name)
	return nil
}

// fakeRoutes is a routing table: the agent's routes and others'.
type fakeRoutes struct {
	table      []TableRoute
	replaceErr map[string]error
}

func (f *fakeRoutes) List() ([]TableRoute, error) { return slices.Clone(f.table), nil }

func (f *fakeRoutes) Replace(r Route) error {
	if err := f.replaceErr[r.key()]; err != nil {
		return err
	}
	for i, h := range f.table {
		if h.Ours && h.key() == r.key() {
			f.table[i].Gw = r.Gw
			return nil
		}
	}
	f.table = append(f.table, TableRoute{Route: r, Ours: true})
	return nil
}

func (f *fakeRoutes) Delete(r Route) error {
	f.table = slices.DeleteFunc(f.table, func(h TableRoute) bool { return h.Ours && h.key() == r.key() })
	return nil
}

func (f *fakeRoutes) DeleteAllOurs() error {
	f.table = slices.DeleteFunc(f.table, func(h TableRoute) bool { return h.Ours })
	return nil
}

// strings lists the table as "dst via gw [ours]", sorted.
func (f *fakeRoutes) strings() []string {
	var out []string
	for _, h := range f.table {
		s := h.Dst.String() + " via " + h.Gw.String()
		if h.Ours {
			s += " ours"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// fakeRules is one family's iptables rules, as "table chain spec".
type fakeRules struct{ rules []string }

func ruleString(table, chain string, spec []string) string {
	return table + " " + chain + " " + strings.Join(spec, " ")
}

func (f *fakeRules) AppendUnique(table, chain string, spec ...string) error {
	s := ruleString(table, chain, spec)
	if !slices.Contains(f.rules, s) {
		f.rules = append(f.rules, s)
	}
	return nil
}

func (f *fakeRules) DeleteIfExists(table, chain string, spec ...string) error {
	s := ruleString(table, chain, spec)
	f.rules = slices.DeleteFunc(f.rules, func(r string) bool { return r == s })
	return nil
}
