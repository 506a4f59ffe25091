package main

import (
	"strings"
	"testing"
)

// -strict fails the run for a side with a failed round or fewer rounds than asked, at any
// pod count, and for a run that measured nothing.
func TestFailedRounds(t *testing.T) {
	sides := []string{"nodeagent", "kubelet", "floor"}
	ok := func() map[string]sideResult {
		return map[string]sideResult{
			"nodeagent": {Rounds: make([]roundResult, 2)},
			"kubelet":   {Rounds: make([]roundResult, 2)},
			"floor":     {Rounds: make([]roundResult, 2)},
		}
	}
	if err := failedRounds([]podsRun{{Pods: 10, Results: ok()}, {Pods: 50, Results: ok()}}, sides, 2); err != nil {
		t.Errorf("every round measured: %v", err)
	}
	bad := ok()
	bad["kubelet"] = sideResult{Rounds: make([]roundResult, 1), Errors: []string{"round 2: pods not running"}}
	delete(bad, "floor")
	err := failedRounds([]podsRun{{Pods: 10, Results: ok()}, {Pods: 50, Results: bad}}, sides, 2)
	if err == nil || !strings.Contains(err.Error(), "kubelet at 50 pods: 1 of 2 rounds") ||
		!strings.Contains(err.Error(), "pods not running") || !strings.Contains(err.Error(), "floor at 50 pods: 0 of 2") ||
		strings.Contains(err.Error(), "nodeagent") || strings.Contains(err.Error(), "at 10 pods") {
		t.Errorf("a failed round and a missing side at 50 pods: %v", err)
	}
	if err := failedRounds(nil, sides, 2); err == nil {
		t.Error("nothing measured: no error")
	}
}
