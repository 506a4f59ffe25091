package admission

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/qos"
)

// ReasonEvicted is the reason of a pod refused while the node is under
// resource pressure: the kubelet's eviction admission handler's.
const ReasonEvicted = "Evicted"

// Pressure reports the node's resource-pressure conditions
// (*eviction.Pressure).
type Pressure interface {
	// Conditions are MemoryPressure, DiskPressure and PIDPressure, those
	// the node has now, in that order.
	Conditions() []v1.NodeConditionType
}

// admitUnderPressure refuses pods the node cannot take while short of a
// resource, as the kubelet's eviction manager does: under memory pressure
// alone, BestEffort pods (unless they tolerate the memory-pressure
// taint); under any other pressure, every pod. Critical pods are always
// admitted.
func admitUnderPressure(logger klog.Logger, p Pressure, pod *v1.Pod) Result {
	if p == nil {
		return Result{Admit: true}
	}
	conds := p.Conditions()
	if len(conds) == 0 || IsCritical(pod) {
		return Result{Admit: true}
	}
	if len(conds) == 1 && conds[0] == v1.NodeMemoryPressure {
		if qos.Class(pod) != v1.PodQOSBestEffort {
			return Result{Admit: true}
		}
		taint := &v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
		if corev1helpers.TolerationsTolerateTaint(logger, pod.Spec.Tolerations, taint, comparisonOperators) {
			return Result{Admit: true}
		}
	}
	return reject(ReasonEvicted, fmt.Sprintf("The node had condition: %v. ", conds))
}
