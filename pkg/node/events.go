package node

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Node events as the kubelet records them: a Normal event on the Node for
// each condition that turns, its reason naming the new state and its
// message "Node <name> status is now: <reason>".
const (
	eventNodeReady    = "NodeReady"
	eventNodeNotReady = "NodeNotReady"
)

// Recorder records events (record.EventRecorder).
type Recorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// conditionEvents are the reasons of the events that the change of the
// agent's conditions from prev to next calls for, in the kubelet's order
// (memory, disk, PID, then Ready). A pressure condition that turns, or
// that appears (it was Unknown: at registration the kubelet starts from a
// Node without conditions), gets one; Ready only when it turns, not when
// it first appears.
func conditionEvents(prev, next []v1.NodeCondition) []string {
	status := func(cs []v1.NodeCondition, t v1.NodeConditionType) (v1.ConditionStatus, bool) {
		for _, c := range cs {
			if c.Type == t {
				return c.Status, true
			}
		}
		return v1.ConditionUnknown, false
	}
	var out []string
	for _, p := range pressureConditions {
		was, _ := status(prev, p.typ)
		now, ok := status(next, p.typ)
		if !ok || now == was {
			continue
		}
		switch now {
		case v1.ConditionTrue:
			out = append(out, p.eventTrue)
		case v1.ConditionFalse:
			out = append(out, p.eventFalse)
		}
	}
	was, existed := status(prev, v1.NodeReady)
	now, ok := status(next, v1.NodeReady)
	if existed && ok && now != was {
		if now == v1.ConditionTrue {
			out = append(out, eventNodeReady)
		} else {
			out = append(out, eventNodeNotReady)
		}
	}
	return out
}

// recordEvents records the Node's condition events, each once.
func (c *Controller) recordEvents(ctx context.Context, reasons []string) {
	if c.cfg.Recorder == nil {
		return
	}
	ref := &v1.ObjectReference{Kind: "Node", Name: c.cfg.NodeName, UID: types.UID(c.cfg.NodeName)}
	var done []string
	for _, r := range reasons {
		if slices.Contains(done, r) {
			continue
		}
		done = append(done, r)
		klog.FromContext(ctx).V(2).Info("Recording event message for node", "event", r)
		c.cfg.Recorder.Eventf(ref, v1.EventTypeNormal, r, "Node %s status is now: %s", c.cfg.NodeName, r)
	}
}
