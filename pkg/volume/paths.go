package volume

import (
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// The kubelet's on-disk layout under the root directory, kept so that tools
// and CSI drivers that know it find what they expect:
//
//	pods/<uid>/volumes/<plugin, "/" escaped as "~">/<volume>
//	pods/<uid>/plugins
//	pods/<uid>/containers
//	pods/<uid>/etc-hosts
//	plugins/kubernetes.io/csi/<driver>/<hash>/globalmount   (CSI staging, later)
const (
	podsDirName       = "pods"
	volumesDirName    = "volumes"
	pluginsDirName    = "plugins"
	containersDirName = "containers"
	etcHostsFileName  = "etc-hosts"
)

// layout computes paths; it never touches the disk.
type layout struct {
	root string
}

func (l layout) podsDir() string { return filepath.Join(l.root, podsDirName) }

// PodDir is pods/<uid>.
func (l layout) podDir(uid types.UID) string {
	return filepath.Join(l.root, podsDirName, string(uid))
}

func (l layout) podVolumesDir(uid types.UID) string {
	return filepath.Join(l.podDir(uid), volumesDirName)
}

func (l layout) podPluginsDir(uid types.UID) string {
	return filepath.Join(l.podDir(uid), pluginsDirName)
}

func (l layout) podContainersDir(uid types.UID) string {
	return filepath.Join(l.podDir(uid), containersDirName)
}

func (l layout) podEtcHosts(uid types.UID) string {
	return filepath.Join(l.podDir(uid), etcHostsFileName)
}

// volumeDir is pods/<uid>/volumes/<escaped plugin>/<volume>.
func (l layout) volumeDir(uid types.UID, pluginName, volName string) string {
	return filepath.Join(l.podVolumesDir(uid), escapePluginName(pluginName), volName)
}

// pluginGlobalDir is where a plugin keeps node-wide state (CSI staging).
func (l layout) pluginGlobalDir(pluginName string) string {
	return filepath.Join(l.root, pluginsDirName, pluginName)
}

func escapePluginName(name string) string { return strings.ReplaceAll(name, "/", "~") }

func unescapePluginName(name string) string { return strings.ReplaceAll(name, "~", "/") }

// validUID refuses a pod UID that could name anything but one directory
// under pods/ (a static pod's UID comes from a file on disk).
func validUID(uid types.UID) bool {
	s := string(uid)
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}
