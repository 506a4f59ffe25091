package conformance

import "strings"

// groupPrefixes map the start of a spec's name (its sig and top-level Describe) to the
// group docs/conformance.md counts it in; the first match wins, so longer prefixes of the
// same Describe come first.
var groupPrefixes = []struct{ prefix, group string }{
	{"[sig-node] Pods Extended", "sig-node pods"},
	{"[sig-node] Pods ", "sig-node pods"},
	{"[sig-node] Pod InPlace Resize", "sig-node in-place resize"},
	{"[sig-node] PodTemplates", "sig-node API objects"},
	{"[sig-node] PreStop", "sig-node lifecycle hooks"},
	{"[sig-node] Container Lifecycle Hook", "sig-node lifecycle hooks"},
	{"[sig-node] Probing container", "sig-node probes"},
	{"[sig-node] Containers ", "sig-node containers"},
	{"[sig-node] InitContainer", "sig-node init containers"},
	{"[sig-node] Ephemeral Containers", "sig-node ephemeral containers"},
	{"[sig-node] Container Runtime", "sig-node runtime"},
	{"[sig-node] KubeletManagedEtcHosts", "sig-node runtime"},
	{"[sig-node] Kubelet ", "sig-node runtime"},
	{"[sig-node] ImageVolume", "sig-node image volume"},
	{"[sig-node] Security Context", "sig-node security context"},
	{"[sig-node] Sysctls", "sig-node sysctls"},
	{"[sig-node] ConfigMap", "sig-node configMap (env)"},
	{"[sig-node] Secrets", "sig-node secret (env)"},
	{"[sig-node] Downward API", "sig-node downwardAPI (env)"},
	{"[sig-node] Variable Expansion", "sig-node variable expansion"},
	{"[sig-node] RuntimeClass", "sig-node RuntimeClass"},
	{"[sig-node] NoExecuteTaintManager", "sig-node taint eviction"},
	{"[sig-node] Lease", "sig-node API objects"},
	{"[sig-node] Node ", "sig-node API objects"},
	{"[sig-node] [DRA]", "sig-node API objects"},
	{"[sig-storage] ConfigMap", "sig-storage configMap"},
	{"[sig-storage] Secrets", "sig-storage secret"},
	{"[sig-storage] Projected", "sig-storage projected"},
	{"[sig-storage] Downward API", "sig-storage downwardAPI"},
	{"[sig-storage] EmptyDir", "sig-storage emptyDir"},
	{"[sig-storage] HostPath", "sig-storage hostPath"},
	{"[sig-storage] Subpath", "sig-storage subPath"},
	{"[sig-storage] CSIInlineVolumes", "sig-storage CSI API objects"},
	{"[sig-storage] VolumeAttachment", "sig-storage CSI API objects"},
	{"[sig-storage] CSIStorageCapacity", "sig-storage CSI API objects"},
	{"[sig-storage] CSINodes", "sig-storage CSI API objects"},
}

// Group names the group of a spec: a known Describe, else its sig and first word.
func Group(spec string) string {
	for _, g := range groupPrefixes {
		if strings.HasPrefix(spec, g.prefix) {
			return g.group
		}
	}
	sig, rest, ok := strings.Cut(strings.TrimPrefix(spec, "["), "] ")
	if !ok {
		return "other"
	}
	word, _, _ := strings.Cut(rest, " ")
	return sig + " " + word
}
