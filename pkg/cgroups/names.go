// Package cgroups owns the kubepods cgroup hierarchy: the kubepods
// cgroup under cgroupRoot (bounded by node allocatable), its burstable
// and besteffort QoS cgroups, and one cgroup per pod (pod<uid>) that the
// runtime puts the pod's sandbox and containers in. It writes the
// kernel's files directly, for cgroup v1 and v2, naming cgroups as the
// cgroupfs or systemd driver does.
package cgroups

import (
	"fmt"
	"path"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Drivers, as cgroupDriver names them.
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

// Names of the hierarchy's levels, as the kubelet names them.
const (
	kubepodsName   = "kubepods"
	burstableName  = "burstable"
	besteffortName = "besteffort"
	podPrefix      = "pod"
	systemdSuffix  = ".slice"
)

// name is a cgroup as a list of components below the hierarchy's root
// ({"kubepods", "burstable", "pod<uid>"}); the driver turns it into a path.
type name []string

func (n name) child(c string) name {
	out := make(name, len(n), len(n)+1)
	copy(out, n)
	return append(out, c)
}

// rootName parses cgroupRoot into components: a cgroupfs path
// (/a/b) or, for systemd, a slice (/a.slice/a-b.slice or a-b.slice).
func rootName(root, driver string) name {
	if driver == DriverSystemd {
		base := strings.TrimSuffix(path.Base(root), systemdSuffix)
		if base == "" || base == "/" || base == "." || base == "-" {
			return nil
		}
		var out name
		for _, p := range strings.Split(base, "-") {
			out = append(out, strings.ReplaceAll(p, "_", "-"))
		}
		return out
	}
	var out name
	for _, p := range strings.Split(path.Clean("/"+root), "/") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// path is the cgroup's path below a hierarchy's mount point, which is
// also what the runtime is given as a cgroup parent: /a/b/c for
// cgroupfs, /a.slice/a-b.slice/a-b-c.slice for systemd (each component's
// dashes escaped as underscores, as systemd reserves them for nesting).
func (n name) path(driver string) string {
	if driver != DriverSystemd {
		return "/" + strings.Join(n, "/")
	}
	if len(n) == 0 {
		return "/"
	}
	var b strings.Builder
	prefix := ""
	for _, c := range n {
		c = strings.ReplaceAll(c, "-", "_")
		if prefix != "" {
			prefix += "-"
		}
		prefix += c
		b.WriteString("/" + prefix + systemdSuffix)
	}
	return b.String()
}

// podCgroupName is the name of a pod's cgroup: pod<uid>.
func podCgroupName(uid types.UID) string { return podPrefix + string(uid) }

// qosParent is the cgroup a pod of the class lives in: kubepods itself for
// Guaranteed pods, its burstable or besteffort child otherwise.
func qosParent(kubepods name, class v1.PodQOSClass) (name, error) {
	switch class {
	case v1.PodQOSGuaranteed:
		return kubepods, nil
	case v1.PodQOSBurstable:
		return kubepods.child(burstableName), nil
	case v1.PodQOSBestEffort:
		return kubepods.child(besteffortName), nil
	}
	return nil, fmt.Errorf("unknown QoS class %q", class)
}
