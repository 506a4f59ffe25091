// Package downward resolves the downward API: a pod's own fields
// (fieldRef) and its containers' resources (resourceFieldRef), which a
// pod reads as environment variables and as the files of downwardAPI
// volumes and projected downwardAPI sources. Both read through here, so
// that a value is the same text in either place, in the kubelet's
// format, and only the fields each place may read differ.
package downward

import v1 "k8s.io/api/core/v1"

// Use is where a value goes.
type Use int

const (
	// Env is a container's environment variable, resolved when the
	// container is created: the pod's addresses and node are known then.
	Env Use = iota + 1
	// Volume is a file of a downwardAPI volume or projected source. It is
	// written before the pod's sandbox (and so its address) exists, then
	// kept up to date as the pod's metadata changes; the API lets it read
	// only the pod's metadata and its containers' resources.
	Volume
)

// Inputs is what the downward API exposes beside the pod object.
type Inputs struct {
	// PodIPs are the pod's addresses, primary first (the node's for a
	// host-network pod). Env only.
	PodIPs []string
	// HostIPs are the node's addresses, primary first. Env only.
	HostIPs []string
	// Allocatable is the node's allocatable resources: what an unset cpu,
	// memory or ephemeral-storage limit reads as.
	Allocatable v1.ResourceList
}
