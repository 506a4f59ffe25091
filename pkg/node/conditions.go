package node

import (
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// pressureCondition is a resource-pressure condition as the kubelet
// words it, when the node has it and when it does not, with the reasons
// of the Node events that mark its turning True and False.
type pressureCondition struct {
	typ                       v1.NodeConditionType
	reasonTrue, messageTrue   string
	reasonFalse, messageFalse string
	eventTrue, eventFalse     string
}

var pressureConditions = []pressureCondition{
	{v1.NodeMemoryPressure, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
		"KubeletHasSufficientMemory", "kubelet has sufficient memory available",
		"NodeHasInsufficientMemory", "NodeHasSufficientMemory"},
	{v1.NodeDiskPressure, "KubeletHasDiskPressure", "kubelet has disk pressure",
		"KubeletHasNoDiskPressure", "kubelet has no disk pressure",
		"NodeHasDiskPressure", "NodeHasNoDiskPressure"},
	{v1.NodePIDPressure, "KubeletHasInsufficientPID", "kubelet has insufficient PID available",
		"KubeletHasSufficientPID", "kubelet has sufficient PID available",
		"NodeHasInsufficientPID", "NodeHasSufficientPID"},
}

// conditions returns prev with the agent's conditions brought up to date:
// every heartbeat is now, and a transition time moves only when the status
// does. pressure are the pressure conditions the node has. Conditions
// owned by others are kept as they are.
func conditions(prev []v1.NodeCondition, notReady error, pressure []v1.NodeConditionType, now metav1.Time) []v1.NodeCondition {
	out := append([]v1.NodeCondition(nil), prev...)
	set := func(c v1.NodeCondition) {
		c.LastHeartbeatTime = now
		c.LastTransitionTime = now
		for i := range out {
			if out[i].Type != c.Type {
				continue
			}
			if out[i].Status == c.Status && !out[i].LastTransitionTime.IsZero() {
				c.LastTransitionTime = out[i].LastTransitionTime
			}
			out[i] = c
			return
		}
		out = append(out, c)
	}
	for _, p := range pressureConditions {
		if slices.Contains(pressure, p.typ) {
			set(v1.NodeCondition{Type: p.typ, Status: v1.ConditionTrue, Reason: p.reasonTrue, Message: p.messageTrue})
		} else {
			set(v1.NodeCondition{Type: p.typ, Status: v1.ConditionFalse, Reason: p.reasonFalse, Message: p.messageFalse})
		}
	}
	if notReady == nil {
		set(v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"})
	} else {
		set(v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: notReady.Error()})
	}
	return out
}

// runtimeHealth turns the results of periodic CRI Status calls into the
// reasons the node is not Ready. One failed call does not flip Ready: the
// runtime counts as down only once it has not answered for downAfter.
type runtimeHealth struct {
	downAfter  time.Duration
	lastOK     time.Time
	runtimeErr error // RuntimeReady not true in the last answer
	networkErr error // NetworkReady not true in the last answer
}

// observe records one Status result. After a failed call the conditions of
// the last answer are kept.
func (h *runtimeHealth) observe(now time.Time, resp *runtimeapi.StatusResponse, err error) {
	if err != nil || resp.GetStatus() == nil {
		return
	}
	h.lastOK = now
	var runtimeReady, networkReady *runtimeapi.RuntimeCondition
	for _, c := range resp.GetStatus().GetConditions() {
		switch c.GetType() {
		case runtimeapi.RuntimeReady:
			runtimeReady = c
		case runtimeapi.NetworkReady:
			networkReady = c
		}
	}
	h.runtimeErr, h.networkErr = nil, nil
	if runtimeReady == nil || !runtimeReady.Status {
		h.runtimeErr = fmt.Errorf("container runtime not ready: %s", describeCondition(runtimeReady))
	}
	if networkReady == nil || !networkReady.Status {
		h.networkErr = fmt.Errorf("container runtime network not ready: %s", describeCondition(networkReady))
	}
}

// describeCondition writes a runtime condition the way kubelet users are
// used to reading it: "NetworkReady=false reason:X message:Y".
func describeCondition(c *runtimeapi.RuntimeCondition) string {
	if c == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s=%t reason:%s message:%s", c.Type, c.Status, c.Reason, c.Message)
}

// notReady is the reason the node is not Ready at now, or nil. failed
// are the agent's own health checks that failed; they count with the
// runtime's errors, as in the kubelet.
func (h *runtimeHealth) notReady(now time.Time, failed ...error) error {
	var runtimeErrs []error
	switch {
	case h.lastOK.IsZero():
		runtimeErrs = append(runtimeErrs, errors.New("container runtime status check may not have completed yet"))
	case !h.lastOK.Add(h.downAfter).After(now):
		runtimeErrs = append(runtimeErrs, errors.New("container runtime is down"))
	}
	if h.runtimeErr != nil {
		runtimeErrs = append(runtimeErrs, h.runtimeErr)
	}
	runtimeErrs = append(runtimeErrs, failed...)
	var errs []error
	if agg := utilerrors.NewAggregate(runtimeErrs); agg != nil {
		errs = append(errs, agg)
	}
	if h.networkErr != nil {
		errs = append(errs, h.networkErr)
	}
	if agg := utilerrors.NewAggregate(errs); agg != nil {
		return agg
	}
	return nil
}
