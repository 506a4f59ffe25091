package main

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeagent/nodeagent/test/harness"
)

// The scaling mode (-scale 10,50,100,250): the whole measurement once per pod count, and
// how the agents' cost per pod grows with it. Issue 24's goal is a flat curve: each cost
// per pod at most 1.2× from 10 pods to 250.

// maxBenchPods is the most pods a round starts: the node's pod CIDR (harness.PodCIDR, a
// /24) has 253 pod addresses, and a few are kept for pods beside the bench's (the CSI
// driver's with -pvc) and for addresses still held by the previous round's pods.
const maxBenchPods = 250

// defaultMaxPods is both agents' maxPods when the configuration leaves it unset.
const defaultMaxPods = 110

// growthGoal is issue 24's bound on the growth of a cost per pod from the smallest N to
// the largest.
const growthGoal = 1.2

// podsRun is the measurement at one pod count: every side's results.
type podsRun struct {
	Pods    int                   `json:"pods"`
	Results map[string]sideResult `json:"results"`
}

// podAddresses is how many pods a pod CIDR can address: all its addresses but the
// network's, the broadcast's and the bridge's gateway.
func podAddresses(cidr string) (int, error) {
	_, ipnet, err := net.ParseCIDR(cidr)
	if err != nil {
		return 0, err
	}
	ones, bits := ipnet.Mask.Size()
	if bits-ones >= 31 || bits-ones < 2 {
		return 0, fmt.Errorf("pod CIDR %s: want a block of 4 to 2^30 addresses", cidr)
	}
	return 1<<(bits-ones) - 3, nil
}

// checkPodCount refuses a pod count the node cannot hold.
func checkPodCount(n int) error {
	if n < 1 {
		return fmt.Errorf("%d pods: want at least 1", n)
	}
	if n > maxBenchPods {
		addrs, _ := podAddresses(harness.PodCIDR)
		return fmt.Errorf("%d pods: the node's pod CIDR %s has %d pod addresses; a round starts at most %d pods", n, harness.PodCIDR, addrs, maxBenchPods)
	}
	return nil
}

// parsePodCounts reads -scale's comma-separated pod counts: each checked, in ascending
// order, each once.
func parsePodCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("-scale %q: %q is no number of pods", s, f)
		}
		if err := checkPodCount(n); err != nil {
			return nil, fmt.Errorf("-scale: %w", err)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-scale %q: want pod counts such as 10,50,100,250", s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// maxPodsFor is the agents' maxPods for a run of these pod counts: 0, their default
// (defaultMaxPods), while none is past 100; past that the largest plus 10, room for the
// cluster's own pods.
func maxPodsFor(ns []int) int {
	if len(ns) == 0 || slices.Max(ns) <= 100 {
		return 0
	}
	return slices.Max(ns) + 10
}

// scalingPoint is one agent's cost per pod at one pod count: medians over rounds.
type scalingPoint struct {
	Pods int `json:"pods"`
	// PerPodStarted is the agent's CPU seconds from the first create request until all
	// pods ran, per pod.
	PerPodStarted *float64 `json:"agentCPUSecondsPerPodStarted,omitempty"`
	// PerPodMinuteIdle is the agent's CPU seconds over the hold with the pods running, per
	// pod and minute.
	PerPodMinuteIdle *float64 `json:"agentCPUSecondsPerPodMinuteIdle,omitempty"`
}

// scalingCurve is one agent's costs per pod over the pod counts of a run.
type scalingCurve struct {
	Side   string         `json:"side"`
	Points []scalingPoint `json:"points"`
	// GrowthStarted and GrowthIdle are each cost at the largest pod count that has it over
	// the cost at the smallest (issue 24's goal: at most growthGoal).
	GrowthStarted *growth `json:"growthPerPodStarted,omitempty"`
	GrowthIdle    *growth `json:"growthPerPodMinuteIdle,omitempty"`
}

// growth is a cost's factor from one pod count to another.
type growth struct {
	From   int     `json:"fromPods"`
	To     int     `json:"toPods"`
	Factor float64 `json:"factor"`
}

// scalingCurves are the agents' costs per pod at each pod count of runs, the agents in the
// main table's order. hold is the length of the hold with the pods running.
func scalingCurves(runs []podsRun, hold time.Duration) []scalingCurve {
	var out []scalingCurve
	for _, side := range []string{harness.AgentNodeagent, harness.AgentKubelet} {
		c := scalingCurve{Side: side}
		found := false
		for _, run := range runs {
			s, ok := run.Results[side]
			if !ok {
				continue
			}
			found = true
			p := scalingPoint{Pods: run.Pods}
			var started, idle []float64
			for _, r := range s.Rounds {
				if r.CPUStart == nil {
					continue
				}
				if v, ok := r.CPUStart.Components[compAgent]; ok {
					started = append(started, v/float64(run.Pods))
				}
			}
			if hold > 0 {
				for _, v := range s.CPUPods {
					idle = append(idle, v/float64(run.Pods)/hold.Minutes())
				}
			}
			if med, _, _, ok := summary(started); ok {
				p.PerPodStarted = &med
			}
			if med, _, _, ok := summary(idle); ok {
				p.PerPodMinuteIdle = &med
			}
			c.Points = append(c.Points, p)
		}
		if !found {
			continue
		}
		c.GrowthStarted = growthOf(c.Points, func(p scalingPoint) *float64 { return p.PerPodStarted })
		c.GrowthIdle = growthOf(c.Points, func(p scalingPoint) *float64 { return p.PerPodMinuteIdle })
		out = append(out, c)
	}
	return out
}

// growthOf is the factor of a cost from the smallest pod count that has it to the largest;
// nil without two such pod counts or with a zero cost at the smallest.
func growthOf(points []scalingPoint, get func(scalingPoint) *float64) *growth {
	var first, last *scalingPoint
	for i := range points {
		if get(points[i]) == nil {
			continue
		}
		if first == nil || points[i].Pods < first.Pods {
			first = &points[i]
		}
		if last == nil || points[i].Pods > last.Pods {
			last = &points[i]
		}
	}
	if first == nil || first.Pods == last.Pods || *get(*first) == 0 {
		return nil
	}
	return &growth{From: first.Pods, To: last.Pods, Factor: *get(*last) / *get(*first)}
}

// writeScalingTable prints the Markdown table of the agents' costs per pod by pod count,
// and their growth from the smallest pod count to the largest. Nothing without a curve.
func writeScalingTable(w io.Writer, curves []scalingCurve) {
	if len(curves) == 0 {
		return
	}
	fmt.Fprintf(w, "\nScaling: the agent's CPU per pod, medians over rounds (issue 24's goal: each at most %.1f× from the smallest N to the largest):\n\n", growthGoal)
	head, rule := "| N", "|---"
	for _, c := range curves {
		head += fmt.Sprintf(" | %s CPU s per pod started", c.Side)
		rule += "|---"
	}
	for _, c := range curves {
		head += fmt.Sprintf(" | %s CPU s per pod-minute, N pods idle", c.Side)
		rule += "|---"
	}
	fmt.Fprintln(w, head+" |")
	fmt.Fprintln(w, rule+"|")
	var pods []int
	for _, c := range curves {
		for _, p := range c.Points {
			pods = append(pods, p.Pods)
		}
	}
	slices.Sort(pods)
	for _, n := range slices.Compact(pods) {
		line := fmt.Sprintf("| %d", n)
		for _, get := range []func(scalingPoint) *float64{
			func(p scalingPoint) *float64 { return p.PerPodStarted },
			func(p scalingPoint) *float64 { return p.PerPodMinuteIdle },
		} {
			for _, c := range curves {
				cell := "—"
				for _, p := range c.Points {
					if v := get(p); p.Pods == n && v != nil {
						cell = fmt.Sprintf("%.3g", *v)
					}
				}
				line += " | " + cell
			}
		}
		fmt.Fprintln(w, line+" |")
	}
	line := "| growth, smallest → largest N"
	for _, get := range []func(scalingCurve) *growth{
		func(c scalingCurve) *growth { return c.GrowthStarted },
		func(c scalingCurve) *growth { return c.GrowthIdle },
	} {
		for _, c := range curves {
			line += " | " + growthCell(get(c))
		}
	}
	fmt.Fprintln(w, line+" |")
}

func growthCell(g *growth) string {
	if g == nil {
		return "—"
	}
	verdict := "within the goal"
	if g.Factor > growthGoal+1e-9 { // 1.2000000000000002 is 1.2
		verdict = "over the goal"
	}
	return fmt.Sprintf("%.2f× (%d → %d, %s)", g.Factor, g.From, g.To, verdict)
}
