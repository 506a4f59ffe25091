package status

import (
	v1 "k8s.io/api/core/v1"
)

// owned are the conditions the agent computes; others (DisruptionTarget,
// readiness gates) belong to someone else and are kept. PodScheduled is
// the kubelet's too: it restates it, with the generation it reflects, on
// every write — and leaves it out of a rejected pod's status.
//
// DisruptionTarget is shared, as in the kubelet: the scheduler or the
// taint manager may set it, and the agent sets it in the final status of
// a pod it evicts. A status that carries one replaces the apiserver's;
// one that does not keeps it.
var owned = map[v1.PodConditionType]bool{
	v1.PodScheduled:              true,
	v1.PodReadyToStartContainers: true,
	v1.PodInitialized:            true,
	v1.PodReady:                  true,
	v1.ContainersReady:           true,
	v1.PodResizePending:          true,
	v1.PodResizeInProgress:       true,
}

// Merge combines the apiserver's current status with the agent's newly
// computed one: foreign conditions are kept (unless the agent's status
// sets one of the type itself), unchanged conditions keep their
// transition time, and a terminal phase is never reverted — nor is a
// terminated container of a pod that has ended.
func Merge(cur, st v1.PodStatus) v1.PodStatus {
	out := *st.DeepCopy()
	curConds := map[v1.PodConditionType]v1.PodCondition{}
	for _, c := range cur.Conditions {
		curConds[c.Type] = c
	}
	set := map[v1.PodConditionType]bool{}
	for i := range out.Conditions {
		set[out.Conditions[i].Type] = true
		if c, ok := curConds[out.Conditions[i].Type]; ok && c.Status == out.Conditions[i].Status {
			out.Conditions[i].LastTransitionTime = c.LastTransitionTime
		}
	}
	for _, c := range cur.Conditions {
		if !owned[c.Type] && !set[c.Type] {
			out.Conditions = append(out.Conditions, c)
		}
	}
	if cur.StartTime != nil {
		out.StartTime = cur.StartTime
	}
	if isTerminal(cur.Phase) {
		if !isTerminal(out.Phase) {
			return cur
		}
		out.Phase = cur.Phase
	}
	// A status computed from a pod older than the apiserver's latest
	// write does not take the generation back.
	out.ObservedGeneration = max(out.ObservedGeneration, cur.ObservedGeneration)
	if out.NominatedNodeName == "" {
		out.NominatedNodeName = cur.NominatedNodeName
	}
	if out.Message == "" && out.Reason == "" {
		out.Message, out.Reason = cur.Message, cur.Reason
	}
	return out
}

func isTerminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }
