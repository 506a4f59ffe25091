package main

import (
	"fmt"
	"sort"
	"strings"
)

// gateSpec is a kubelet feature gate at the pinned release: its default,
// whether it is locked to it, and its stage (ALPHA, BETA, GA, DEPRECATED).
type gateSpec struct {
	def    bool
	locked bool
	stage  string
}

// honouredGates are the gates nodeagent reads, and where. Any other known
// gate set against its default is accepted with a warning: nodeagent keeps
// its one behaviour, which for most gates (those of the apiserver, the
// controllers and the scheduler, which the kubelet's gate set also holds)
// is no concern of a node.
var honouredGates = map[string]string{
	"EventedPLEG":                     "nodeagent follows the runtime's container events (CRI GetContainerEvents) and relists every 30s as the fallback while the event stream is open, every second otherwise (the kubelet's default is off, relisting every second); `EventedPLEG: false` relists every second only",
	"KubeletCrashLoopBackOffMax":      "off leaves the restart back-off cap at 300s and refuses crashLoopBackOff.maxContainerRestartPeriod, as the kubelet does",
	"KubeletEnsureSecretPulledImages": "off lets any pod use any image present, records no pulls and refuses imagePullCredentialsVerificationPolicy and preloadedImagesVerificationAllowlist, as the kubelet does",
}

// checkFeatureGates checks featureGates as the kubelet's gate set does:
// an unknown name, or a locked gate set against its default, is refused
// in the kubelet's words. A known gate set against its default that
// nodeagent does not read yields one warning.
func checkFeatureGates(gates map[string]bool) (warnings, refusals []string) {
	names := make([]string, 0, len(gates))
	for name := range gates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v := gates[name]
		spec, ok := kubeletFeatureGates[name]
		switch {
		case !ok:
			refusals = append(refusals, fmt.Sprintf("featureGates: unrecognized feature gate: %s", name))
		case spec.locked && v != spec.def:
			refusals = append(refusals, fmt.Sprintf("featureGates: cannot set feature gate %s to %v, feature is locked to %v", name, v, spec.def))
		case v == spec.def:
		case honouredGates[name] != "":
		default:
			warnings = append(warnings, fmt.Sprintf("featureGates: %s=%v is accepted but not read by nodeagent, which behaves as with the gate's default (%v)", name, v, spec.def))
		}
	}
	return warnings, refusals
}

// featureGatesMarkdown is the README's paragraph on feature gates.
func featureGatesMarkdown() string {
	locked := 0
	for _, s := range kubeletFeatureGates {
		if s.locked {
			locked++
		}
	}
	names := make([]string, 0, len(honouredGates))
	for name := range honouredGates {
		names = append(names, name)
	}
	sort.Strings(names)
	var items []string
	for _, name := range names {
		items = append(items, fmt.Sprintf("`%s`: %s", name, honouredGates[name]))
	}
	return fmt.Sprintf("`featureGates` (and `--feature-gates`) know the %d gates of the kubelet of %s. "+
		"As with the kubelet, an unknown name is refused (\"unrecognized feature gate: X\"), and so is one of the %d "+
		"gates locked to their default set to the other value. Honoured: %s. Any other gate set against its default "+
		"is accepted with one warning: nodeagent behaves as with the gate's default.\n",
		len(kubeletFeatureGates), gateSourceVersion(), locked, strings.Join(items, "; "))
}

// gateSourceVersion is the Kubernetes version kubeletFeatureGates was
// generated from ("v1.37.1").
func gateSourceVersion() string {
	_, rest, _ := strings.Cut(kubeletFeatureGatesSource, "@")
	v, _, _ := strings.Cut(rest, " ")
	return v
}
