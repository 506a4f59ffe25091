package main

import (
	"strings"
	"testing"
)

// fleetRuns are a run of 10, 100 and 250 pods; only 100's requests matter, the others are
// there to be passed over.
func fleetRuns() []podsRun {
	other := sideResult{Requests: []float64{1}, RequestsHeld: []float64{1}, RequestsPerMinPods: []float64{1e6}}
	return []podsRun{
		{Pods: 10, Results: map[string]sideResult{"nodeagent": other, "kubelet": other}},
		{Pods: 100, Results: map[string]sideResult{
			"nodeagent": {Requests: []float64{1500, 1530, 1560}, RequestsHeld: []float64{30, 40, 20}, RequestsPerMinPods: []float64{60, 50, 40}},
			"kubelet":   {Requests: []float64{1800}, RequestsHeld: []float64{100}, RequestsPerMinPods: []float64{100}},
			"floor":     {},
		}},
		{Pods: 250, Results: map[string]sideResult{"nodeagent": other, "kubelet": other}},
	}
}

func TestFleetOf(t *testing.T) {
	f := fleetOf(fleetRuns())
	if f == nil {
		t.Fatal("no fleet arithmetic")
	}
	if f.Nodes != 5000 || f.PodsPerNode != 110 || f.MeasuredPods != 100 {
		t.Errorf("%d nodes × %d pods from %d pods, want 5000 × 110 from 100", f.Nodes, f.PodsPerNode, f.MeasuredPods)
	}
	for _, tc := range []struct {
		side string
		want fleetSide
	}{
		{"nodeagent", fleetSide{
			PerMinute: 50, PerMinuteFleet: 55, FleetPerSecond: 5000 * 55.0 / 60,
			PerRound: 1530, Held: 30, PerPodChurned: 15, FleetChurn: 5000 * 110 * 15,
		}},
		{"kubelet", fleetSide{
			PerMinute: 100, PerMinuteFleet: 110, FleetPerSecond: 5000 * 110.0 / 60,
			PerRound: 1800, Held: 100, PerPodChurned: 17, FleetChurn: 5000 * 110 * 17,
		}},
	} {
		got, ok := f.Sides[tc.side]
		if !ok {
			t.Errorf("%s: missing", tc.side)
			continue
		}
		for _, v := range []struct {
			name      string
			got, want float64
		}{
			{"per minute", got.PerMinute, tc.want.PerMinute},
			{"per minute at 110 pods", got.PerMinuteFleet, tc.want.PerMinuteFleet},
			{"fleet per second", got.FleetPerSecond, tc.want.FleetPerSecond},
			{"per round", got.PerRound, tc.want.PerRound},
			{"held", got.Held, tc.want.Held},
			{"per pod churned", got.PerPodChurned, tc.want.PerPodChurned},
			{"fleet churn", got.FleetChurn, tc.want.FleetChurn},
		} {
			if !near(v.got, v.want) {
				t.Errorf("%s %s: %g, want %g", tc.side, v.name, v.got, v.want)
			}
		}
	}
	if _, ok := f.Sides["floor"]; ok {
		t.Error("the floor makes no requests, yet has a fleet")
	}
	if f.IdleRatio == nil || !near(*f.IdleRatio, 0.5) || f.ChurnRatio == nil || !near(*f.ChurnRatio, 15.0/17) {
		t.Errorf("ratios %v, %v; want 0.5, %g", f.IdleRatio, f.ChurnRatio, 15.0/17)
	}
}

func TestFleetRunClosestTo110(t *testing.T) {
	for _, tc := range []struct {
		pods []int
		want int
	}{
		{[]int{10, 50, 100, 250}, 100},
		{[]int{50}, 50},
		{[]int{100, 120}, 100}, // as close: the smaller
		{[]int{10, 115, 250}, 115},
	} {
		var runs []podsRun
		for _, n := range tc.pods {
			runs = append(runs, podsRun{Pods: n})
		}
		if got, ok := fleetRun(runs); !ok || got.Pods != tc.want {
			t.Errorf("%v: %d, want %d", tc.pods, got.Pods, tc.want)
		}
	}
}

func TestFleetOfNothing(t *testing.T) {
	if f := fleetOf(nil); f != nil {
		t.Errorf("no runs: %+v", f)
	}
	floorOnly := []podsRun{{Pods: 100, Results: map[string]sideResult{"floor": {}}}}
	if f := fleetOf(floorOnly); f != nil {
		t.Errorf("the floor alone: %+v", f)
	}
}

func TestWriteFleet(t *testing.T) {
	var b strings.Builder
	writeFleet(&b, fleetOf(fleetRuns()))
	t.Logf("\n%s", b.String())
	want := `
Fleet arithmetic: 5000 nodes × 110 pods, from one node's requests measured at N=100 (the idle rate scaled linearly to 110 pods: × 110/100, an assumption, not a measurement), medians over rounds:

idle: requests/s = nodes × (requests per minute, N pods idle × 110/N) / 60
  nodeagent: 5000 × (50 × 110/100) / 60 = 4583 requests/s
  kubelet:   5000 × (100 × 110/100) / 60 = 9167 requests/s
  nodeagent / kubelet: 0.50
churn: requests per pod started and deleted = (requests per round − requests during the hold with N pods) / N
  nodeagent: (1530 − 30) / 100 = 15; every pod of the fleet replaced once: 5000 × 110 × 15 = 8.25e+06 requests
  kubelet:   (1800 − 100) / 100 = 17; every pod of the fleet replaced once: 5000 × 110 × 17 = 9.35e+06 requests
  nodeagent / kubelet: 0.88
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
