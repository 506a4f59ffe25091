package main

import (
	"runtime/debug"
	"strings"
)

// versionModule is the Kubernetes staging module whose version go.mod pins;
// its v0.X.Y is Kubernetes v1.X.Y. Reading it from the build info keeps the
// version in one place.
const versionModule = "k8s.io/client-go"

// unknownVersion is reported when the build carries no module information.
const unknownVersion = "v0.0.0-unknown"

// kubernetesVersion returns the Kubernetes version the agent implements,
// e.g. "v1.37.1", or unknownVersion.
func kubernetesVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return unknownVersion
	}
	return versionFromBuildInfo(info)
}

func versionFromBuildInfo(info *debug.BuildInfo) string {
	for _, dep := range info.Deps {
		if dep.Path != versionModule {
			continue
		}
		if dep.Replace != nil && dep.Replace.Version != "" {
			dep = dep.Replace
		}
		if v := stagingToKubernetes(dep.Version); v != "" {
			return v
		}
	}
	return unknownVersion
}

// stagingToKubernetes maps a staging module version to the Kubernetes
// release: v0.37.1 → v1.37.1, v0.37.0-rc.1 → v1.37.0-rc.1.
func stagingToKubernetes(v string) string {
	rest, ok := strings.CutPrefix(v, "v0.")
	if !ok || rest == "" {
		return ""
	}
	return "v1." + rest
}

// versionString is what --version prints, in the form kubeadm parses.
func versionString() string {
	return "Kubernetes " + kubernetesVersion()
}
