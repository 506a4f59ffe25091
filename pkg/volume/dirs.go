package volume

import (
	"context"

	v1 "k8s.io/api/core/v1"
)

// PodVolumeDir is one of a pod's volumes as it lies in the pod directory.
type PodVolumeDir struct {
	// Name is the volume's name in the pod spec.
	Name string
	// Plugin is the kubelet's name of the plugin that sets it up
	// ("kubernetes.io/empty-dir").
	Plugin string
	// Path is pods/<uid>/volumes/<plugin>/<name>; it exists once the
	// volume is set up.
	Path string
	// Usage, when set, asks the volume's driver for its usage
	// (NodeGetVolumeStats) instead of walking Path.
	Usage func(ctx context.Context) (VolumeUsage, error)
}

// VolumeUsage is a volume's size and use as its driver reports them.
type VolumeUsage struct {
	CapacityBytes, AvailableBytes, UsedBytes int64
	Inodes, InodesFree, InodesUsed           int64
}

// VolumeDirs lists where the pod's volumes live in its pod directory, for
// measuring them. Volumes that live elsewhere (hostPath, image) are left
// out.
// CSI volumes are listed once published, with their drivers' usage.
// It does not touch the disk.
func (m *Manager) VolumeDirs(pod *v1.Pod) []PodVolumeDir {
	var out []PodVolumeDir
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		p := m.pluginFor(vol)
		if p == nil || p.name() == hostPathPluginName || p.name() == imagePluginName {
			continue
		}
		if c, ok := p.(*csiPlugin); ok {
			// Measured by their drivers, where they say they can; the
			// directory is named after the PV, known once published.
			if d, ok := c.volumeDir(pod.UID, vol.Name); ok {
				out = append(out, d)
			}
			continue
		}
		out = append(out, PodVolumeDir{Name: vol.Name, Plugin: p.name(), Path: m.layout.Pod(pod.UID).VolumeDir(p.name(), vol.Name)})
	}
	return out
}
