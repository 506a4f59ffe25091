package admission

import (
	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// matchNode checks the pod's nodeSelector and required node affinity
// against the node's labels, and its nodeName.
func matchNode(pod *v1.Pod, node *v1.Node) Result {
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
		return predicateFailed(ReasonNodeAffinity, descNodeAffinity)
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return predicateFailed(ReasonNodeName, descNodeName)
	}
	return Result{Admit: true}
}

// comparisonOperators: tolerations with Gt/Lt are an alpha feature
// (TaintTolerationComparisonOperators), off by default.
const comparisonOperators = false

// tolerateTaints rejects a pod that does not tolerate one of the node's
// NoExecute taints; NoSchedule taints are the scheduler's business, and
// a pod bound here by hand may run despite them, as with the kubelet.
func tolerateTaints(logger klog.Logger, pod *v1.Pod, node *v1.Node) Result {
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations,
		func(t *v1.Taint) bool { return t.Effect == v1.TaintEffectNoExecute }, comparisonOperators)
	if untolerated {
		return predicateFailed(ReasonTaintToleration, descTaintToleration)
	}
	return Result{Admit: true}
}
