package main

import (
	"fmt"
	"io"

	"github.com/nodeagent/nodeagent/test/harness"
)

// The fleet arithmetic: what one node's requests to the apiserver come to for a fleet of
// fleetNodes nodes of fleetPods pods each, from the figures of one pod count.

const (
	fleetNodes = 5000
	fleetPods  = defaultMaxPods
)

// fleetEstimate is the fleet arithmetic of a run, per agent.
type fleetEstimate struct {
	Nodes       int `json:"nodes"`
	PodsPerNode int `json:"podsPerNode"`
	// MeasuredPods is the pod count the per-node figures were measured at; the idle rate
	// is scaled linearly from it to PodsPerNode.
	MeasuredPods int                  `json:"measuredAtPods"`
	Sides        map[string]fleetSide `json:"sides"`
	// The ratios nodeagent / kubelet, when both were measured.
	IdleRatio  *float64 `json:"idleNodeagentOverKubelet,omitempty"`
	ChurnRatio *float64 `json:"churnNodeagentOverKubelet,omitempty"`
}

// fleetSide is one agent's fleet arithmetic: medians over rounds, and what follows.
type fleetSide struct {
	// PerMinute is the node's requests per minute with the measured pods idle; PerMinute110
	// that scaled linearly to PodsPerNode pods; FleetPerSecond that for the whole fleet:
	// Nodes × PerMinute110 / 60.
	PerMinute      float64 `json:"requestsPerMinutePerNodeMeasured"`
	PerMinuteFleet float64 `json:"requestsPerMinutePerNodeScaled"`
	FleetPerSecond float64 `json:"fleetRequestsPerSecondIdle"`
	// PerRound and Held are the node's requests per round and over its hold with the pods
	// running; PerPodChurned (PerRound − Held) / pods: a pod's start and deletion;
	// FleetChurn that for every pod of the fleet once.
	PerRound      float64 `json:"requestsPerRound"`
	Held          float64 `json:"requestsDuringHold"`
	PerPodChurned float64 `json:"requestsPerPodStartedAndDeleted"`
	FleetChurn    float64 `json:"fleetRequestsToReplaceEveryPodOnce"`
}

// fleetRun is the pod count whose figures the fleet arithmetic uses: the one closest to
// fleetPods (the smaller of two as close).
func fleetRun(runs []podsRun) (podsRun, bool) {
	best, ok := podsRun{}, false
	for _, r := range runs {
		if !ok || abs(r.Pods-fleetPods) < abs(best.Pods-fleetPods) {
			best, ok = r, true
		}
	}
	return best, ok
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// fleetOf is the fleet arithmetic from the run closest to fleetPods pods; nil when no agent
// has its idle requests per minute.
func fleetOf(runs []podsRun) *fleetEstimate {
	run, ok := fleetRun(runs)
	if !ok || run.Pods == 0 {
		return nil
	}
	f := &fleetEstimate{Nodes: fleetNodes, PodsPerNode: fleetPods, MeasuredPods: run.Pods, Sides: map[string]fleetSide{}}
	for _, side := range []string{harness.AgentNodeagent, harness.AgentKubelet} {
		s := run.Results[side]
		perMin, _, _, ok := summary(s.RequestsPerMinPods)
		if !ok {
			continue
		}
		fs := fleetSide{PerMinute: perMin}
		fs.PerMinuteFleet = perMin * fleetPods / float64(run.Pods)
		fs.FleetPerSecond = fleetNodes * fs.PerMinuteFleet / 60
		perRound, _, _, okR := summary(s.Requests)
		held, _, _, okH := summary(s.RequestsHeld)
		if okR && okH {
			fs.PerRound, fs.Held = perRound, held
			fs.PerPodChurned = (perRound - held) / float64(run.Pods)
			fs.FleetChurn = fleetNodes * fleetPods * fs.PerPodChurned
		}
		f.Sides[side] = fs
	}
	if len(f.Sides) == 0 {
		return nil
	}
	na, okN := f.Sides[harness.AgentNodeagent]
	kl, okK := f.Sides[harness.AgentKubelet]
	if okN && okK && kl.FleetPerSecond > 0 {
		r := na.FleetPerSecond / kl.FleetPerSecond
		f.IdleRatio = &r
	}
	if okN && okK && kl.PerPodChurned > 0 {
		r := na.PerPodChurned / kl.PerPodChurned
		f.ChurnRatio = &r
	}
	return f
}

// writeFleet prints the fleet arithmetic with its formulas and the figures put into them.
func writeFleet(w io.Writer, f *fleetEstimate) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "\nFleet arithmetic: %d nodes × %d pods, from one node's requests measured at N=%d", f.Nodes, f.PodsPerNode, f.MeasuredPods)
	if f.MeasuredPods != f.PodsPerNode {
		fmt.Fprintf(w, " (the idle rate scaled linearly to %d pods: × %d/%d, an assumption, not a measurement)", f.PodsPerNode, f.PodsPerNode, f.MeasuredPods)
	}
	fmt.Fprintln(w, ", medians over rounds:")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "idle: requests/s = nodes × (requests per minute, N pods idle × %d/N) / 60\n", f.PodsPerNode)
	sides := []string{harness.AgentNodeagent, harness.AgentKubelet}
	for _, side := range sides {
		s, ok := f.Sides[side]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "  %-10s %d × (%.4g × %d/%d) / 60 = %.4g requests/s\n", side+":", f.Nodes, s.PerMinute, f.PodsPerNode, f.MeasuredPods, s.FleetPerSecond)
	}
	if f.IdleRatio != nil {
		fmt.Fprintf(w, "  nodeagent / kubelet: %.2f\n", *f.IdleRatio)
	}
	fmt.Fprintln(w, "churn: requests per pod started and deleted = (requests per round − requests during the hold with N pods) / N")
	for _, side := range sides {
		s, ok := f.Sides[side]
		if !ok || s.PerRound == 0 {
			continue
		}
		fmt.Fprintf(w, "  %-10s (%.4g − %.4g) / %d = %.4g; every pod of the fleet replaced once: %d × %d × %.4g = %.4g requests\n",
			side+":", s.PerRound, s.Held, f.MeasuredPods, s.PerPodChurned, f.Nodes, f.PodsPerNode, s.PerPodChurned, s.FleetChurn)
	}
	if f.ChurnRatio != nil {
		fmt.Fprintf(w, "  nodeagent / kubelet: %.2f\n", *f.ChurnRatio)
	}
}
