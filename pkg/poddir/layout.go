// Package poddir owns where a pod's files lie on the node: the kubelet's
// layout under the root directory (--root-dir, usually /var/lib/kubelet).
// Users, node tools and CSI drivers know this layout, and the agent
// rebuilds its state from it after a restart, so it must not drift:
//
//	<root>/pods/<uid>/volumes/<plugin, "/" escaped as "~">/<volume>
//	<root>/pods/<uid>/volume-subpaths/<volume>/<container>/<mount index>
//	<root>/pods/<uid>/plugins
//	<root>/pods/<uid>/containers/<container>/<file>   (termination messages)
//	<root>/pods/<uid>/etc-hosts
//	<root>/pods/<uid>/userns                          (its user namespace, hostUsers: false)
//
// It only computes paths; creating and removing them is its callers' job.
package poddir

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// DirMode is the mode of the directories the agent creates in a pod's
// directory: the agent's group may look in, other users may not.
const DirMode os.FileMode = 0o750

const (
	podsDirName       = "pods"
	volumesDirName    = "volumes"
	subPathsDirName   = "volume-subpaths"
	pluginsDirName    = "plugins"
	containersDirName = "containers"
	etcHostsFileName  = "etc-hosts"
	usernsFileName    = "userns"
)

// Layout is the layout under one root directory.
type Layout struct {
	root string
}

// New returns the layout under root.
func New(root string) Layout { return Layout{root: filepath.Clean(root)} }

// Root is the root directory itself.
func (l Layout) Root() string { return l.root }

// PodsDir holds one directory per pod, named by its UID.
func (l Layout) PodsDir() string { return filepath.Join(l.root, podsDirName) }

// Pod is the directory of the pod with this UID. Check the UID with
// ValidUID first when it does not come from the apiserver.
func (l Layout) Pod(uid types.UID) Pod {
	return Pod{dir: filepath.Join(l.root, podsDirName, string(uid))}
}

// Pod is one pod's directory, pods/<uid>.
type Pod struct {
	dir string
}

// Dir is the pod's directory; removing it removes everything below.
func (p Pod) Dir() string { return p.dir }

// VolumesDir holds the pod's volumes, one directory per plugin.
func (p Pod) VolumesDir() string { return filepath.Join(p.dir, volumesDirName) }

// VolumeDir is where the named plugin sets up the named volume.
func (p Pod) VolumeDir(plugin, volume string) string {
	return filepath.Join(p.VolumesDir(), EscapePluginName(plugin), volume)
}

// SubPathsDir holds the bind mounts of the pod's volumeMounts that have
// a subPath.
func (p Pod) SubPathsDir() string { return filepath.Join(p.dir, subPathsDirName) }

// SubPath is the bind target of one volumeMount's subPath: the volume,
// the container and the mount's index in it make it unique.
func (p Pod) SubPath(volume, container string, mountIndex int) string {
	return filepath.Join(p.SubPathsDir(), volume, container, strconv.Itoa(mountIndex))
}

// PluginsDir is where volume plugins keep the pod's own state.
func (p Pod) PluginsDir() string { return filepath.Join(p.dir, pluginsDirName) }

// ContainersDir holds one directory per container that has files of its
// own in the pod directory.
func (p Pod) ContainersDir() string { return filepath.Join(p.dir, containersDirName) }

// ContainerDir is the directory of the named container; each start of it
// gets a fresh termination message file there.
func (p Pod) ContainerDir(container string) string {
	return filepath.Join(p.ContainersDir(), container)
}

// EtcHosts is the pod's managed hosts file, bound at /etc/hosts.
func (p Pod) EtcHosts() string { return filepath.Join(p.dir, etcHostsFileName) }

// UserNamespace records the host IDs of a hostUsers: false pod's user
// namespace, so that a restarted agent gives the pod the same ones.
func (p Pod) UserNamespace() string { return filepath.Join(p.dir, usernsFileName) }

// ValidUID refuses a pod UID that could name anything but one directory
// under pods/: a static pod's UID comes from a file on disk, and a
// directory found under pods/ may be anything.
func ValidUID(uid types.UID) bool {
	s := string(uid)
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// EscapePluginName turns a plugin's name ("kubernetes.io/empty-dir") into
// one path element, as the kubelet does ("kubernetes.io~empty-dir").
func EscapePluginName(name string) string { return strings.ReplaceAll(name, "/", "~") }

// UnescapePluginName reverses EscapePluginName, for directories found on
// disk.
func UnescapePluginName(name string) string { return strings.ReplaceAll(name, "~", "/") }
