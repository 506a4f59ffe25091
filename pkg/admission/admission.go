// Package admission decides whether a pod may run on this node at all,
// before anything of it is created: its sysctls, its OS, its resources
// against what the node has left, its node affinity, its host ports and
// the node's NoExecute taints. Reasons and messages are the kubelet's,
// since users and controllers read them from the pod's status.
package admission

import (
	"fmt"
	goruntime "runtime"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Reasons a pod is rejected with, as the kubelet names them.
const (
	ReasonSysctlForbidden       = "SysctlForbidden"
	ReasonOSSelectorMismatch    = "PodOSSelectorNodeLabelDoesNotMatch"
	ReasonOSNotSupported        = "PodOSNotSupported"
	ReasonInvalidNodeInfo       = "InvalidNodeInfo"
	ReasonUnexpected            = "UnexpectedAdmissionError"
	ReasonNodeAffinity          = "NodeAffinity"
	ReasonNodeName              = "NodeName"
	ReasonNodePorts             = "NodePorts"
	ReasonTaintToleration       = "TaintToleration"
	outOfPrefix                 = "OutOf"
	messageOSSelectorMismatch   = "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
	messageOSNotSupported       = "Failed to admit pod as the OS field doesn't match node OS"
	messageInvalidNodeInfo      = "Kubelet cannot get node info."
	descNodeAffinity            = "node(s) didn't match Pod's node affinity/selector"
	descNodeName                = "node(s) didn't match the requested node name"
	descNodePorts               = "node(s) didn't have free ports for the requested pod ports"
	descTaintToleration         = "node(s) had taints that the pod didn't tolerate"
	configSourceAnnotation      = "kubernetes.io/config.source"
	configSourceAPI             = "api"
	configMirrorAnnotation      = "kubernetes.io/config.mirror"
	rejectedMessagePrefix       = "Pod was rejected: "
	predicateFailedMessageShape = "Predicate %s failed: %s"
)

// Result is the decision on one pod.
type Result struct {
	// Admit is true when the pod may run.
	Admit bool
	// Reason and Message say why not, as the kubelet words them; Message
	// is what follows "Pod was rejected: " in the pod's status.
	Reason, Message string
}

// StatusMessage is the message of a rejected pod's status.
func (r Result) StatusMessage() string { return rejectedMessagePrefix + r.Message }

func reject(reason, message string) Result { return Result{Reason: reason, Message: message} }

func predicateFailed(name, desc string) Result {
	return reject(name, fmt.Sprintf(predicateFailedMessageShape, name, desc))
}

// Config configures an Admitter.
type Config struct {
	// AllowedUnsafeSysctls are allowedUnsafeSysctls: names or prefixes
	// ending in "*" a pod may set beyond the safe ones.
	AllowedUnsafeSysctls []string
	// KernelVersion is the host's kernel release; safe sysctls that the
	// kernel does not namespace yet are not allowed. Empty allows them all.
	KernelVersion string
	// Pressure reports the node's resource pressure; nil is none.
	Pressure Pressure
}

// Admitter decides on pods. It holds no state about pods: the caller
// hands it the pods already admitted.
type Admitter struct {
	sysctls  *allowlist
	pressure Pressure
	requests requestCache
}

// New validates cfg and builds an Admitter.
func New(cfg Config) (*Admitter, error) {
	al, err := newAllowlist(safeSysctls(cfg.KernelVersion), cfg.AllowedUnsafeSysctls)
	if err != nil {
		return nil, err
	}
	return &Admitter{sysctls: al, pressure: cfg.Pressure}, nil
}

// Admit decides whether pod may run on node, given the pods admitted
// before it, in the kubelet's order of checks: resource pressure, sysctls, then the OS,
// then resources (not for critical pods), node affinity, node name and
// host ports, then the node's NoExecute taints (not for static pods). A nil node is rejected: nothing can be
// checked against it.
func (a *Admitter) Admit(logger klog.Logger, pod *v1.Pod, node *v1.Node, admitted []*v1.Pod) Result {
	if r := admitUnderPressure(logger, a.pressure, pod); !r.Admit {
		return r
	}
	if r := a.sysctls.admit(pod); !r.Admit {
		return r
	}
	if node == nil {
		return reject(ReasonInvalidNodeInfo, messageInvalidNodeInfo)
	}
	if want, ok := pod.Labels[v1.LabelOSStable]; ok && want != nodeOS(node) {
		return reject(ReasonOSSelectorMismatch, messageOSSelectorMismatch)
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != goruntime.GOOS {
		return reject(ReasonOSNotSupported, messageOSNotSupported)
	}
	// Critical pods are never refused for resources: the kubelet makes
	// room for them by evicting others instead.
	if !IsCritical(pod) {
		if r := fitResources(pod, node, admitted, requestsOf(admitted, &a.requests)); !r.Admit {
			return r
		}
	}
	if r := matchNode(pod, node); !r.Admit {
		return r
	}
	if r := fitHostPorts(pod, admitted); !r.Admit {
		return r
	}
	if !isStatic(pod) {
		if r := tolerateTaints(logger, pod, node); !r.Admit {
			return r
		}
	}
	return Result{Admit: true}
}

// nodeOS is the node's OS label; the agent's own OS stands in when the
// label is missing or wrong, as the kubelet does.
func nodeOS(node *v1.Node) string {
	if os, ok := node.Labels[v1.LabelOSStable]; ok && os == goruntime.GOOS {
		return os
	}
	return goruntime.GOOS
}

// systemCriticalPriority is the priority of system-cluster-critical, the
// least a pod's priority makes it critical with.
const systemCriticalPriority = 2000000000

// IsCritical says whether the kubelet counts the pod as critical: a static
// pod, a mirror pod, or a pod of a system-critical priority.
func IsCritical(pod *v1.Pod) bool {
	if isStatic(pod) {
		return true
	}
	if _, ok := pod.Annotations[configMirrorAnnotation]; ok {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}

// isStatic: a pod from a manifest file or URL rather than the apiserver.
func isStatic(pod *v1.Pod) bool {
	src, ok := pod.Annotations[configSourceAnnotation]
	return ok && src != configSourceAPI
}

// kernelAtLeast compares a kernel release ("6.18.44-fc") with "major.minor".
func kernelAtLeast(release, want string) bool {
	parse := func(s string) (int, int) {
		parts := strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' || r == '+' })
		var out [2]int
		for i := 0; i < 2 && i < len(parts); i++ {
			out[i], _ = strconv.Atoi(parts[i])
		}
		return out[0], out[1]
	}
	rM, rm := parse(release)
	wM, wm := parse(want)
	return rM > wM || (rM == wM && rm >= wm)
}
