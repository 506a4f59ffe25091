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
	{"[sig-storage] CSI Mock volume attach", "sig-storage CSI Mock attach"},
	{"[sig-storage] CSI Mock volume fsgroup policies", "sig-storage CSI Mock fsGroup policy"},
	{"[sig-storage] CSI Mock fsgroup as mount option", "sig-storage CSI Mock fsGroup mount option"},
	{"[sig-storage] CSI Mock honor pv reclaim policy", "sig-storage CSI Mock reclaim policy"},
	{"[sig-storage] CSI Mock volume limit", "sig-storage CSI Mock volume limit"},
	{"[sig-storage] CSI Mock VolumeLimitScaling", "sig-storage CSI Mock volume limit scaling"},
	{"[sig-storage] CSI Mock volume node stage", "sig-storage CSI Mock NodeStage errors"},
	{"[sig-storage] CSI Mock volume service account token", "sig-storage CSI Mock service account token"},
	{"[sig-storage] CSI Mock volume storage capacity scoring", "sig-storage CSI Mock storage capacity scoring"},
	{"[sig-storage] CSI Mock volume storage capacity", "sig-storage CSI Mock storage capacity"},
	{"[sig-storage] CSI Mock workload info", "sig-storage CSI Mock workload info"},
	{"[sig-storage] CSI Mock PVC Unused Condition", "sig-storage CSI Mock PVC unused"},
	{"[sig-storage] CSI Mock volume expansion", "sig-storage CSI Mock expansion"},
	{"[sig-storage] CSI Mock volume snapshot", "sig-storage CSI Mock snapshot"},
	{"[sig-storage] CSI Mock selinux", "sig-storage CSI Mock SELinux"},
	{"[sig-storage] CSI Mock Node Volume Health", "sig-storage CSI Mock volume health"},
	{"[sig-storage] CSI Mock when kubelet restart", "sig-storage CSI Mock kubelet restart"},
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

// SIG names the special interest group of a spec ("sig-network"), the group of the whole
// suite's table.
func SIG(spec string) string {
	if sig, _, ok := strings.Cut(strings.TrimPrefix(spec, "["), "] "); ok && strings.HasPrefix(spec, "[") {
		return sig
	}
	return "other"
}
