package volume

import (
	"context"

	v1 "k8s.io/api/core/v1"
)

// plugin sets up and tears down one kind of volume. The manager picks the
// plugin whose canSupport accepts the volume; CSI will be one more plugin
// (NodeStage into its global directory, NodePublish into dir).
type plugin interface {
	// name is the kubelet's plugin name, e.g. "kubernetes.io/empty-dir".
	name() string
	canSupport(vol *v1.Volume) bool
	// setUp makes the volume ready and returns what containers bind. It is
	// called on every pod sync and must be idempotent: a volume already
	// set up is checked and its contents refreshed, never remounted.
	setUp(ctx context.Context, req *setUpRequest) (Mount, error)
	// tearDown undoes setUp for the volume directory dir. A directory that
	// is already gone is success.
	tearDown(ctx context.Context, dir string) error
}

// setUpRequest is what a plugin gets to set up one volume of one pod.
type setUpRequest struct {
	pod *v1.Pod
	vol *v1.Volume
	// dir is pods/<uid>/volumes/<plugin>/<volume>; plugins that do not
	// live in the pod directory (hostPath) ignore it.
	dir string
	// fsGroup, when set, owns the volume's files (pod securityContext).
	fsGroup *int64
	// fsGroupPolicy is the pod's fsGroupChangePolicy (nil means Always).
	fsGroupPolicy *v1.PodFSGroupChangePolicy
}

// Mount is what the pod worker needs to bind one volume into containers.
type Mount struct {
	// HostPath is the path on the host to bind-mount into containers.
	HostPath string
	// ReadOnly means the volume must be bound read-only whatever the
	// volumeMount says (secret, configMap, downwardAPI, projected).
	ReadOnly bool
	// Managed is true when the agent created HostPath (everything but
	// hostPath); SELinux relabelling, when it comes, applies only to those.
	Managed bool
	// Plugin names the plugin that set the volume up.
	Plugin string
	// Image is true for an image volume: HostPath is empty and the
	// runtime mounts the pulled image itself (CRI Mount.image).
	Image bool
	// Block is true for a raw block volume: HostPath is the device the
	// driver published, for containers' volumeDevices only.
	Block bool
}

// Mounts maps a pod's volume names to their mounts.
type Mounts map[string]Mount
