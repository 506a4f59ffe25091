package downward

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FieldValue is the value of a fieldRef of the pod. Both uses read the
// pod's name, namespace, uid, labels and annotations, whole or one key
// (metadata.labels['app']); env also reads spec.nodeName (or its old
// name spec.host), spec.serviceAccountName, status.podIP(s) and
// status.hostIP(s). Anything else is an error, as is a key that no label
// or annotation could have.
func FieldValue(pod *v1.Pod, sel *v1.ObjectFieldSelector, use Use, in Inputs) (string, error) {
	path := sel.FieldPath
	if name, key, ok := splitSubscript(path); ok {
		return subscriptValue(pod, path, name, key)
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	if use == Env {
		if v, ok, err := envOnlyValue(pod, path, in); ok {
			return v, err
		}
	}
	return "", fmt.Errorf("unsupported fieldPath: %v", path)
}

// envOnlyValue resolves the fields only env may read; false when path is
// none of them.
func envOnlyValue(pod *v1.Pod, path string, in Inputs) (string, bool, error) {
	switch path {
	case "spec.nodeName", "spec.host":
		return pod.Spec.NodeName, true, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, true, nil
	case "status.podIP":
		if len(in.PodIPs) == 0 {
			return "", true, nil
		}
		return in.PodIPs[0], true, nil
	case "status.podIPs":
		return strings.Join(in.PodIPs, ","), true, nil
	case "status.hostIP", "status.hostIPs":
		// As with the kubelet, the container waits for the node to know
		// its address rather than start with an empty one.
		if len(in.HostIPs) == 0 {
			return "", true, fmt.Errorf("node has no IP address to report as %s", path)
		}
		if path == "status.hostIP" {
			return in.HostIPs[0], true, nil
		}
		return strings.Join(in.HostIPs, ","), true, nil
	}
	return "", false, nil
}

// splitSubscript reads "<name>['<key>']", the key being everything
// between the first "['" and the final "']".
func splitSubscript(path string) (name, key string, ok bool) {
	rest, ok := strings.CutSuffix(path, "']")
	if !ok {
		return "", "", false
	}
	name, key, ok = strings.Cut(rest, "['")
	if !ok || name == "" {
		return "", "", false
	}
	return name, key, true
}

// subscriptValue is one label or annotation. The key is checked as the
// apiserver checks the keys themselves, annotations case-insensitively.
func subscriptValue(pod *v1.Pod, path, name, key string) (string, error) {
	var m map[string]string
	var errs []string
	switch name {
	case "metadata.labels":
		m, errs = pod.Labels, validation.IsQualifiedName(key)
	case "metadata.annotations":
		m, errs = pod.Annotations, validation.IsQualifiedName(strings.ToLower(key))
	default:
		return "", fmt.Errorf("fieldPath %q does not support subscript", path)
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("invalid key subscript in %s: %s", path, strings.Join(errs, ";"))
	}
	return m[key], nil
}

// formatMap renders labels or annotations as the kubelet does, and as
// images already parse them: one key="value" line per key in key order,
// the value quoted as a Go string, no final newline.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m[k]))
	}
	return b.String()
}
