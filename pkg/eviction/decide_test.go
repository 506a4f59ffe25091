package eviction

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const mi = 1 << 20

func qty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func hardMemory(q string) Threshold {
	return Threshold{Signal: SignalMemoryAvailable, Value: Value{Quantity: qty(q)}}
}

// memObs is memory.available of a 1000Mi node, measured at t.
func memObs(availableMi int64, t time.Time) observations {
	return observations{SignalMemoryAvailable: {available: availableMi * mi, capacity: 1000 * mi, at: t}}
}

// step is one evaluation in a scenario: at a time, with the memory
// available, what conditions hold and which thresholds are acted on.
type evalStep struct {
	at        time.Duration
	available int64
	// measured is when the signal was read; zero: at the step's time.
	measured   time.Duration
	conditions string
	act        string
}

func TestEvaluate(t *testing.T) {
	soft := Threshold{Signal: SignalMemoryAvailable, Value: Value{Quantity: qty("300Mi")}, GracePeriod: time.Minute}
	reclaim := hardMemory("100Mi")
	reclaim.MinReclaim = &Value{Quantity: qty("50Mi")}
	tests := []struct {
		name       string
		thresholds []Threshold
		transition time.Duration
		steps      []evalStep
	}{
		{name: "hard threshold: condition and action at once, condition kept for the transition period",
			thresholds: []Threshold{hardMemory("100Mi")}, transition: 5 * time.Minute,
			steps: []evalStep{
				{at: 0, available: 500, conditions: "[]", act: "[]"},
				{at: 10 * time.Second, available: 50, conditions: "[MemoryPressure]", act: "[memory.available<100Mi]"},
				{at: 20 * time.Second, available: 500, conditions: "[MemoryPressure]", act: "[]"},
				{at: 5*time.Minute + 9*time.Second, available: 500, conditions: "[MemoryPressure]", act: "[]"},
				{at: 5*time.Minute + 10*time.Second, available: 500, conditions: "[]", act: "[]"},
			}},
		{name: "soft threshold: condition at once, action after the grace period, reset when no longer met",
			thresholds: []Threshold{soft}, transition: time.Minute,
			steps: []evalStep{
				{at: 0, available: 200, conditions: "[MemoryPressure]", act: "[]"},
				{at: 50 * time.Second, available: 200, conditions: "[MemoryPressure]", act: "[]"},
				{at: 60 * time.Second, available: 200, conditions: "[MemoryPressure]", act: "[memory.available<300Mi for 1m0s]"},
				{at: 70 * time.Second, available: 400, conditions: "[MemoryPressure]", act: "[]"},
				{at: 80 * time.Second, available: 200, conditions: "[MemoryPressure]", act: "[]"},
				{at: 140 * time.Second, available: 200, conditions: "[MemoryPressure]", act: "[memory.available<300Mi for 1m0s]"},
			}},
		{name: "minimum reclaim: acted on until the threshold plus the reclaim is free",
			thresholds: []Threshold{reclaim}, transition: time.Minute,
			steps: []evalStep{
				{at: 0, available: 90, conditions: "[MemoryPressure]", act: "[memory.available<100Mi]"},
				{at: 10 * time.Second, available: 120, conditions: "[MemoryPressure]", act: "[memory.available<100Mi]"},
				{at: 20 * time.Second, available: 160, conditions: "[MemoryPressure]", act: "[]"},
				{at: 30 * time.Second, available: 120, conditions: "[MemoryPressure]", act: "[]"},
			}},
		{name: "a measurement not renewed since the last pass is not acted on twice",
			thresholds: []Threshold{hardMemory("100Mi")}, transition: time.Minute,
			steps: []evalStep{
				{at: 0, available: 50, conditions: "[MemoryPressure]", act: "[memory.available<100Mi]"},
				{at: 10 * time.Second, measured: 1, available: 50, conditions: "[MemoryPressure]", act: "[]"},
				{at: 20 * time.Second, available: 50, conditions: "[MemoryPressure]", act: "[memory.available<100Mi]"},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mem memory
			for _, s := range tt.steps {
				measured := s.at
				if s.measured != 0 {
					measured = 0 // the first step's reading, again
				}
				v := evaluate(mem, tt.thresholds, memObs(s.available, t0.Add(measured)), t0.Add(s.at), tt.transition)
				mem = v.next
				if got := fmt.Sprint(v.next.conditions); got != s.conditions {
					t.Errorf("at %s: conditions = %s, want %s", s.at, got, s.conditions)
				}
				if got := fmt.Sprint(v.act); got != s.act {
					t.Errorf("at %s: act = %s, want %s", s.at, got, s.act)
				}
			}
		})
	}
}

func TestEvaluateOrdersMemoryFirstAndKeepsConditionOrder(t *testing.T) {
	ts := []Threshold{
		{Signal: SignalPIDAvailable, Value: Value{Quantity: qty("100")}},
		{Signal: SignalNodeFsAvailable, Value: Value{Percentage: 0.1}},
		hardMemory("100Mi"),
	}
	obs := observations{
		SignalMemoryAvailable: {available: 10 * mi, capacity: 1000 * mi, at: t0},
		SignalNodeFsAvailable: {available: 5, capacity: 100, at: t0},
		SignalPIDAvailable:    {available: 10, capacity: 1000, at: t0},
	}
	v := evaluate(memory{}, ts, obs, t0, time.Minute)
	if got, want := fmt.Sprint(v.next.conditions), fmt.Sprint([]v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}); got != want {
		t.Errorf("conditions = %s, want %s", got, want)
	}
	if v.act[0].Signal != SignalMemoryAvailable {
		t.Errorf("act = %v, want memory first", v.act)
	}
}

func TestObserve(t *testing.T) {
	s := summary(nodeStats{memAvail: 50 * mi, memWS: 950 * mi, fsAvail: 10, fsCap: 100, inodesFree: 7, inodes: 70,
		imageAvail: 20, imageCap: 200, maxPID: 1000, procs: 900, podsAvail: 30 * mi, podsWS: 70 * mi})
	got := observe(s)
	want := map[Signal][2]int64{
		SignalMemoryAvailable:            {50 * mi, 1000 * mi},
		SignalAllocatableMemoryAvailable: {30 * mi, 100 * mi},
		SignalNodeFsAvailable:            {10, 100},
		SignalNodeFsInodesFree:           {7, 70},
		SignalImageFsAvailable:           {20, 200},
		SignalContainerFsAvailable:       {20, 200},
		SignalPIDAvailable:               {100, 1000},
	}
	for sig, w := range want {
		o, ok := got[sig]
		if !ok || o.available != w[0] || o.capacity != w[1] {
			t.Errorf("%s = %+v (found %v), want available %d of %d", sig, o, ok, w[0], w[1])
		}
	}
	if _, ok := got[SignalImageFsInodesFree]; ok {
		t.Error("imagefs.inodesFree observed without inode numbers")
	}
}
