package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/test/harness"
)

func TestParsePodCounts(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []int
		wantErr  string
	}{
		{name: "issue 24's", in: "10,50,100,250", want: []int{10, 50, 100, 250}},
		{name: "unordered, repeated, spaced", in: "250, 10,10,", want: []int{10, 250}},
		{name: "one", in: "100", want: []int{100}},
		{name: "past the pod CIDR", in: "10,251", wantErr: "251 pods: the node's pod CIDR 10.244.0.0/24 has 253 pod addresses; a round starts at most 250"},
		{name: "none", in: "0", wantErr: "want at least 1"},
		{name: "no number", in: "10,many", wantErr: `"many" is no number of pods`},
		{name: "empty", in: ",", wantErr: "want pod counts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePodCounts(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestPodCIDRHoldsTheBench: the largest round, and a few pods beside it, fit in the node's
// pod CIDR.
func TestPodCIDRHoldsTheBench(t *testing.T) {
	addrs, err := podAddresses(harness.PodCIDR)
	if err != nil {
		t.Fatal(err)
	}
	if addrs != 253 {
		t.Errorf("%s: %d pod addresses, want 253", harness.PodCIDR, addrs)
	}
	if maxBenchPods+3 > addrs {
		t.Errorf("%d pods and 3 more do not fit in %d addresses", maxBenchPods, addrs)
	}
	if maxPodsFor([]int{maxBenchPods}) < maxBenchPods+1 {
		t.Errorf("maxPods %d for %d pods: no room for the CSI driver's pod", maxPodsFor([]int{maxBenchPods}), maxBenchPods)
	}
}

func TestMaxPodsFor(t *testing.T) {
	for _, tc := range []struct {
		ns   []int
		want int
	}{
		{nil, 0},
		{[]int{100}, 0},
		{[]int{10, 50, 100}, 0},
		{[]int{101}, 111},
		{[]int{10, 50, 100, 250}, 260},
	} {
		if got := maxPodsFor(tc.ns); got != tc.want {
			t.Errorf("maxPodsFor(%v) = %d, want %d", tc.ns, got, tc.want)
		}
	}
}

// agentRounds are an agent's rounds at one pod count: in each, the agent's CPU from the
// first create to all running (startCPU) and over the hold with the pods (heldCPU).
func agentRounds(startCPU, heldCPU []float64) sideResult {
	s := sideResult{CPUPods: heldCPU}
	for _, v := range startCPU {
		s.Rounds = append(s.Rounds, roundResult{CPUStart: &cpuSplit{Components: map[string]float64{compAgent: v}}})
	}
	return s
}

// scaleRuns are a -scale 10,100,250 run with 30 s holds: nodeagent's cost per pod flat
// but for a little growth at 250, the kubelet's growing; the floor has no agent.
func scaleRuns() []podsRun {
	return []podsRun{
		{Pods: 10, Results: map[string]sideResult{
			"nodeagent": agentRounds([]float64{0.1, 0.12, 0.11}, []float64{0.05, 0.05, 0.06}),
			"kubelet":   agentRounds([]float64{0.3}, []float64{0.2}),
			"floor":     {Rounds: []roundResult{{CPUStart: &cpuSplit{Components: map[string]float64{compContainerd: 1}}}}},
		}},
		{Pods: 100, Results: map[string]sideResult{
			"nodeagent": agentRounds([]float64{1.1, 1.2, 1.0}, []float64{0.5, 0.55, 0.6}),
			"kubelet":   agentRounds([]float64{4}, []float64{2.5}),
		}},
		{Pods: 250, Results: map[string]sideResult{
			"nodeagent": agentRounds([]float64{3.0}, []float64{1.5}),
			"kubelet":   agentRounds([]float64{15}, nil),
		}},
	}
}

func TestScalingCurves(t *testing.T) {
	curves := scalingCurves(scaleRuns(), 30*time.Second)
	if len(curves) != 2 || curves[0].Side != "nodeagent" || curves[1].Side != "kubelet" {
		t.Fatalf("curves %+v, want nodeagent's and the kubelet's", curves)
	}
	type fig struct {
		pods            int
		started, idle   float64
		hasStart, hasId bool
	}
	for _, tc := range []struct {
		side          string
		want          []fig
		growthStarted float64
		growthIdle    float64
	}{
		{
			side: "nodeagent",
			want: []fig{
				{10, 0.011, 0.01, true, true},   // 0.11 s / 10 pods; 0.05 s / 10 pods / 0.5 min
				{100, 0.011, 0.011, true, true}, // 1.1 / 100; 0.55 / 100 / 0.5
				{250, 0.012, 0.012, true, true}, // 3 / 250; 1.5 / 250 / 0.5
			},
			growthStarted: 0.012 / 0.011, growthIdle: 1.2,
		},
		{
			side: "kubelet",
			want: []fig{
				{10, 0.03, 0.04, true, true},
				{100, 0.04, 0.05, true, true},
				{250, 0.06, 0, true, false},
			},
			// The idle cost at 250 is missing: its growth is to 100.
			growthStarted: 2, growthIdle: 1.25,
		},
	} {
		t.Run(tc.side, func(t *testing.T) {
			var c scalingCurve
			for _, cc := range curves {
				if cc.Side == tc.side {
					c = cc
				}
			}
			if len(c.Points) != len(tc.want) {
				t.Fatalf("points %+v, want %d", c.Points, len(tc.want))
			}
			for i, w := range tc.want {
				p := c.Points[i]
				if p.Pods != w.pods || (p.PerPodStarted != nil) != w.hasStart || (p.PerPodMinuteIdle != nil) != w.hasId {
					t.Fatalf("point %d: %+v, want %+v", i, p, w)
				}
				if w.hasStart && !near(*p.PerPodStarted, w.started) {
					t.Errorf("%d pods: %g CPU s per pod started, want %g", w.pods, *p.PerPodStarted, w.started)
				}
				if w.hasId && !near(*p.PerPodMinuteIdle, w.idle) {
					t.Errorf("%d pods: %g CPU s per pod-minute, want %g", w.pods, *p.PerPodMinuteIdle, w.idle)
				}
			}
			if c.GrowthStarted == nil || !near(c.GrowthStarted.Factor, tc.growthStarted) || c.GrowthStarted.From != 10 || c.GrowthStarted.To != 250 {
				t.Errorf("growth per pod started %+v, want %g from 10 to 250", c.GrowthStarted, tc.growthStarted)
			}
			if c.GrowthIdle == nil || !near(c.GrowthIdle.Factor, tc.growthIdle) {
				t.Errorf("growth per pod-minute %+v, want %g", c.GrowthIdle, tc.growthIdle)
			}
		})
	}
}

func TestGrowthOfOnePodCount(t *testing.T) {
	curves := scalingCurves(scaleRuns()[:1], 30*time.Second)
	for _, c := range curves {
		if c.GrowthStarted != nil || c.GrowthIdle != nil {
			t.Errorf("%s: growth %+v %+v from one pod count", c.Side, c.GrowthStarted, c.GrowthIdle)
		}
	}
}

func TestWriteScalingTable(t *testing.T) {
	var b strings.Builder
	writeScalingTable(&b, scalingCurves(scaleRuns(), 30*time.Second))
	t.Logf("\n%s", b.String())
	want := `
Scaling: the agent's CPU per pod, medians over rounds (issue 24's goal: each at most 1.2× from the smallest N to the largest):

| N | nodeagent CPU s per pod started | kubelet CPU s per pod started | nodeagent CPU s per pod-minute, N pods idle | kubelet CPU s per pod-minute, N pods idle |
|---|---|---|---|---|
| 10 | 0.011 | 0.03 | 0.01 | 0.04 |
| 100 | 0.011 | 0.04 | 0.011 | 0.05 |
| 250 | 0.012 | 0.06 | 0.012 | — |
| growth, smallest → largest N | 1.09× (10 → 250, within the goal) | 2.00× (10 → 250, over the goal) | 1.20× (10 → 250, within the goal) | 1.25× (10 → 100, over the goal) |
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestPodCounts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		scale   string
		nSet    bool
		want    []int
		wantErr string
	}{
		{name: "-n", n: 100, want: []int{100}},
		{name: "-n past 100", n: 250, nSet: true, want: []int{250}},
		{name: "-n past the pod CIDR", n: 300, nSet: true, wantErr: "-n: 300 pods"},
		{name: "-scale", n: 100, scale: "50,10", want: []int{10, 50}},
		{name: "-n and -scale", n: 20, nSet: true, scale: "10,50", wantErr: "one or the other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options{n: tc.n}
			err := podCounts(&o, tc.scale, tc.nSet)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(o.ns, tc.want) || o.scale != (tc.scale != "") {
				t.Errorf("ns %v, scale %v, %v; want %v", o.ns, o.scale, err, tc.want)
			}
		})
	}
}
