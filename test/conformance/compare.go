package conformance

import (
	"fmt"
	"io"
	"sort"
)

// WriteComparison writes, as a Markdown table, the pass counts per group of two runs of
// the same focus (nodeagent's and the kubelet's), then the specs whose outcome differs.
func WriteComparison(w io.Writer, agent, kubelet *Summary) error {
	return WriteComparisonBy(w, agent, kubelet, Group)
}

// WriteComparisonBy is WriteComparison with the groups that group names (SIG for the
// whole suite's table).
func WriteComparisonBy(w io.Writer, agent, kubelet *Summary, group func(spec string) string) error {
	type row struct{ agentPassed, agentRan, kubeletPassed, kubeletRan int }
	rows := map[string]*row{}
	get := func(g string) *row {
		if rows[g] == nil {
			rows[g] = &row{}
		}
		return rows[g]
	}
	for _, g := range agent.GroupsBy(group) {
		r := get(g.Group)
		r.agentPassed, r.agentRan = g.Passed, g.Passed+g.Failed
	}
	for _, g := range kubelet.GroupsBy(group) {
		r := get(g.Group)
		r.kubeletPassed, r.kubeletRan = g.Passed, g.Passed+g.Failed
	}
	groups := make([]string, 0, len(rows))
	for g := range rows {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	fmt.Fprintf(w, "| group | nodeagent passed | kubelet passed |\n|---|---:|---:|\n")
	var total row
	for _, g := range groups {
		r := rows[g]
		fmt.Fprintf(w, "| %s | %d / %d | %d / %d |\n", g, r.agentPassed, r.agentRan, r.kubeletPassed, r.kubeletRan)
		total.agentPassed += r.agentPassed
		total.agentRan += r.agentRan
		total.kubeletPassed += r.kubeletPassed
		total.kubeletRan += r.kubeletRan
	}
	fmt.Fprintf(w, "| **all** | **%d / %d** | **%d / %d** |\n", total.agentPassed, total.agentRan, total.kubeletPassed, total.kubeletRan)

	outcome := func(s *Summary) map[string]Spec {
		m := map[string]Spec{}
		for _, sp := range s.Specs {
			m[sp.Name] = sp
		}
		return m
	}
	a, k := outcome(agent), outcome(kubelet)
	var names []string
	for n := range a {
		names = append(names, n)
	}
	for n := range k {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	state := func(sp Spec, ok bool) string {
		switch {
		case !ok:
			return "not run"
		case sp.Failed():
			return "failed"
		default:
			return sp.State
		}
	}
	first := true
	for _, n := range names {
		as, aok := a[n]
		ks, kok := k[n]
		if sa, sk := state(as, aok), state(ks, kok); sa != sk || sa == "failed" {
			if first {
				fmt.Fprintf(w, "\nSpecs that failed on either node:\n\n| spec | nodeagent | kubelet |\n|---|---|---|\n")
				first = false
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", n, sa, sk)
		}
	}
	return nil
}
