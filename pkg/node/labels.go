package node

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels the kubelet sets on its Node and reconciles on an existing one.
const (
	labelBetaOS   = "beta.kubernetes.io/os"
	labelBetaArch = "beta.kubernetes.io/arch"
	// annotationControllerManagedAttach tells the attach/detach controller
	// that it, not the node, attaches volumes.
	annotationControllerManagedAttach = "volumes.kubernetes.io/controller-managed-attach-detach"
	// taintExternalCloudProvider keeps pods off a node until the cloud
	// controller manager initialises it.
	taintExternalCloudProvider = "node.cloudprovider.kubernetes.io/uninitialized"
)

// allowedKubernetesLabels are the kubernetes.io/k8s.io labels a node may set
// on itself; the NodeRestriction admission plugin refuses the others.
var allowedKubernetesLabels = map[string]bool{
	v1.LabelHostname:                true,
	v1.LabelTopologyZone:            true,
	v1.LabelTopologyRegion:          true,
	v1.LabelFailureDomainBetaZone:   true,
	v1.LabelFailureDomainBetaRegion: true,
	v1.LabelInstanceType:            true,
	v1.LabelInstanceTypeStable:      true,
	v1.LabelOSStable:                true,
	v1.LabelArchStable:              true,
	labelBetaOS:                     true,
	labelBetaArch:                   true,
	"kubernetes.io/instance-type":   true,
}

// allowedKubernetesLabelPrefixes are namespaces reserved for nodes themselves.
var allowedKubernetesLabelPrefixes = []string{"kubelet.kubernetes.io/", "node.kubernetes.io/"}

// ParseLabels parses "--node-labels" ("k=v,k2=v2") and refuses labels a
// node may not set on itself, as the kubelet does at start-up.
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	var forbidden []string
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return nil, fmt.Errorf("--node-labels: %q is not key=value", kv)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("--node-labels: invalid key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("--node-labels: invalid value %q for %q: %s", v, k, strings.Join(errs, "; "))
		}
		if !labelAllowed(k) {
			forbidden = append(forbidden, k)
		}
		out[k] = v
	}
	if len(forbidden) > 0 {
		sort.Strings(forbidden)
		return nil, fmt.Errorf("--node-labels: a node may not set these 'kubernetes.io' or 'k8s.io' labels on itself (NodeRestriction): %s; "+
			"use the kubelet.kubernetes.io/ or node.kubernetes.io/ prefix, or let an administrator set them", strings.Join(forbidden, ", "))
	}
	return out, nil
}

func labelAllowed(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	isReserved := func(domain string) bool { return prefix == domain || strings.HasSuffix(prefix, "."+domain) }
	if !isReserved("kubernetes.io") && !isReserved("k8s.io") {
		return true
	}
	if allowedKubernetesLabels[key] {
		return true
	}
	for _, p := range allowedKubernetesLabelPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// ParseTaints parses "--register-with-taints" ("key=value:Effect,key:Effect").
func ParseTaints(s string) ([]v1.Taint, error) {
	var out []v1.Taint
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, spec := range strings.Split(s, ",") {
		spec = strings.TrimSpace(spec)
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok {
			return nil, fmt.Errorf("--register-with-taints: %q has no effect, want key[=value]:Effect", spec)
		}
		t := v1.Taint{Effect: v1.TaintEffect(effect)}
		t.Key, t.Value, _ = strings.Cut(kv, "=")
		if err := ValidateTaint(t); err != nil {
			return nil, fmt.Errorf("--register-with-taints: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// ValidateTaint checks a registration taint's key, value and effect.
func ValidateTaint(t v1.Taint) error {
	if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
		return fmt.Errorf("invalid taint key %q: %s", t.Key, strings.Join(errs, "; "))
	}
	if t.Value != "" {
		if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
			return fmt.Errorf("invalid taint value %q: %s", t.Value, strings.Join(errs, "; "))
		}
	}
	switch t.Effect {
	case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		return nil
	default:
		return fmt.Errorf("invalid taint effect %q for %q, want NoSchedule, PreferNoSchedule or NoExecute", t.Effect, t.Key)
	}
}
