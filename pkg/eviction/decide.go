package eviction

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
)

// The manager's decisions are pure, as pkg/sync's: evaluate takes what
// the manager remembers and what it measured now, and returns what it
// remembers next and which thresholds call for reclaiming. The manager
// carries that out (node-level reclaim, one eviction) and measures again.

// memory is what the manager carries from one pass to the next.
type memory struct {
	// firstMet is when each threshold met (ignoring its grace period) was
	// first seen met.
	firstMet map[key]time.Time
	// conditionSeen is when each pressure condition was last seen.
	conditionSeen map[v1.NodeConditionType]time.Time
	// active are the thresholds met past their grace periods: they stay
	// until their minimum reclaim is free as well.
	active []Threshold
	// conditions are the pressure conditions reported, in the kubelet's
	// order.
	conditions []v1.NodeConditionType
	// last is when each signal was last measured.
	last map[Signal]time.Time
}

// verdict is what one evaluation comes to.
type verdict struct {
	// next is what to remember.
	next memory
	// act are the thresholds to reclaim for now, most urgent first:
	// past their grace periods, on signals measured anew since the last
	// pass (an old measurement would evict twice for one shortage).
	act []Threshold
}

// evaluate applies the thresholds to what was observed at now, with the
// kubelet's rules: a threshold is met when less than its value is
// available, and one that was acted on stays met until its minimum
// reclaim is free too; a condition holds from the first time one of its
// thresholds is met (before any grace period) until none has been for
// the transition period; pods are evicted for a threshold once it has
// been met for its grace period.
func evaluate(prev memory, thresholds []Threshold, obs observations, now time.Time, transition time.Duration) verdict {
	var metNow []Threshold
	for _, t := range thresholds {
		if met(t, obs, false) {
			metNow = append(metNow, t)
		}
	}
	for _, t := range prev.active {
		if met(t, obs, true) && !slices.ContainsFunc(metNow, func(m Threshold) bool { return m.key() == t.key() }) {
			metNow = append(metNow, t)
		}
	}

	next := memory{
		firstMet:      map[key]time.Time{},
		conditionSeen: map[v1.NodeConditionType]time.Time{},
		last:          map[Signal]time.Time{},
	}
	for _, t := range metNow {
		at, ok := prev.firstMet[t.key()]
		if !ok {
			at = now
		}
		next.firstMet[t.key()] = at
		next.conditionSeen[signalCondition[t.Signal]] = now
	}
	for c, at := range prev.conditionSeen {
		if _, ok := next.conditionSeen[c]; !ok && now.Sub(at) < transition {
			next.conditionSeen[c] = at
		}
	}
	for _, c := range pressureConditions {
		if at, ok := next.conditionSeen[c]; ok && (at.Equal(now) || now.Sub(at) < transition) {
			next.conditions = append(next.conditions, c)
		}
	}
	for _, t := range metNow {
		if now.Sub(next.firstMet[t.key()]) >= t.GracePeriod {
			next.active = append(next.active, t)
		}
	}
	var act []Threshold
	for _, t := range next.active {
		o := obs[t.Signal]
		last, seen := prev.last[t.Signal]
		if !seen || o.at.IsZero() || o.at.After(last) {
			act = append(act, t)
		}
	}
	for s, o := range obs {
		next.last[s] = o.at
	}
	slices.SortStableFunc(act, func(a, b Threshold) int { return urgency(a) - urgency(b) })
	return verdict{next: next, act: act}
}

// urgency orders thresholds as the kubelet reclaims them: memory first.
func urgency(t Threshold) int {
	if signalResource[t.Signal] == v1.ResourceMemory {
		return 0
	}
	return 1
}
