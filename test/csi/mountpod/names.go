package mountpod

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Metadata the driver puts on mount pods. The prefix is fixed whatever the driver's name,
// so that a cluster's tools can find every mount pod of this kind.
const (
	metaPrefix = "mountpod.csi.nodeagent.dev/"
	// LabelApp marks every mount pod; LabelVolume carries the volume's key.
	LabelApp      = "app.kubernetes.io/name"
	LabelAppValue = "csi-mountpod"
	LabelVolume   = metaPrefix + "volume"
	// AnnotationHandle holds the volume handle, which need not fit a label value.
	AnnotationHandle = metaPrefix + "volume-handle"
	// AnnotationDriver names the driver that made the pod.
	AnnotationDriver = metaPrefix + "driver"
	// refPrefix starts the annotation keys of the pod's users: one per target path, the
	// key naming a hash of the path and the value the path itself.
	refPrefix = metaPrefix + "ref-"
)

// volumeKey names a volume on a node: a short hash of the node and the handle, fit for a
// pod name, a label value and a directory name whatever characters the handle holds. The
// node is in it because mount pods of several nodes may share a namespace.
func volumeKey(node, handle string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + handle))
	return hex.EncodeToString(sum[:8])
}

// mountPodName is the name of the mount pod serving a volume on a node.
func mountPodName(node, handle string) string { return "mountpod-" + volumeKey(node, handle) }

// volumeDir is the host directory a mount pod serves its volume under: the mount pod
// mounts the file system on mnt below it.
func volumeDir(stateDir, node, handle string) string {
	return filepath.Join(stateDir, volumeKey(node, handle))
}

// refKey is the annotation key recording target as a user of the mount pod.
func refKey(target string) string {
	sum := sha256.Sum256([]byte(target))
	return refPrefix + hex.EncodeToString(sum[:8])
}

// Users lists the target paths recorded as users of a mount pod, sorted.
func Users(pod *corev1.Pod) []string {
	var out []string
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, refPrefix) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// addRef records target as a user of pod; it says whether pod changed.
func addRef(pod *corev1.Pod, target string) bool {
	k := refKey(target)
	if v, ok := pod.Annotations[k]; ok && v == target {
		return false
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[k] = target
	return true
}

// dropRef forgets target as a user of pod; it says whether pod changed.
func dropRef(pod *corev1.Pod, target string) bool {
	k := refKey(target)
	if _, ok := pod.Annotations[k]; !ok {
		return false
	}
	delete(pod.Annotations, k)
	return true
}
