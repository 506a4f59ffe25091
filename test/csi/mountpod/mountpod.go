package mountpod

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// servedPath is where a mount pod's container sees its volume directory.
const servedPath = "/served"

// mountPodSpec is the mount pod serving handle on the driver's node: a privileged busybox
// with the volume's host directory mounted both ways, which mounts a tmpfs on mnt below it
// (after cfg.MountPodDelay, to stand in for a slow FUSE start) and keeps it there until
// told to stop. It is ready while the tmpfs is mounted.
func mountPodSpec(cfg Config, handle string) *corev1.Pod {
	key := volumeKey(cfg.NodeID, handle)
	mnt := servedPath + "/mnt"
	script := fmt.Sprintf(`trap 'umount %[1]s 2>/dev/null; exit 0' TERM INT
sleep %[2]s & wait $!
mkdir -p %[1]s
grep -q " %[1]s " /proc/mounts || mount -t tmpfs -o size=64m mountpod-%[3]s %[1]s || exit 1
echo "serving %[1]s"
while true; do sleep 3600 & wait $!; done
`, mnt, strconv.FormatFloat(cfg.MountPodDelay.Seconds(), 'f', -1, 64), key)
	bidi := corev1.MountPropagationBidirectional
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        mountPodName(cfg.NodeID, handle),
			Namespace:   cfg.Namespace,
			Labels:      map[string]string{LabelApp: LabelAppValue, LabelVolume: key},
			Annotations: map[string]string{AnnotationHandle: handle, AnnotationDriver: cfg.DriverName},
		},
		Spec: corev1.PodSpec{
			NodeName:                      cfg.NodeID,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []corev1.Container{{
				Name:            "mount",
				Image:           cfg.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"sh", "-c", script},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "served", MountPath: servedPath, MountPropagation: &bidi}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: mountedCommand()}},
					PeriodSeconds: 1, FailureThreshold: 1,
				},
			}},
			Volumes: []corev1.Volume{{Name: "served", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: volumeDir(cfg.StateDir, cfg.NodeID, handle), Type: &dirOrCreate}}}},
		},
	}
}

// mountedCommand succeeds in a mount pod's container while its file system is mounted.
// Some busybox builds (Debian's) have no mountpoint applet; all have grep.
func mountedCommand() []string {
	return []string{"grep", "-q", " " + servedPath + "/mnt tmpfs ", "/proc/mounts"}
}

// podReady says whether a mount pod serves: Ready, and not on its way out.
func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ensureMountPod returns the volume's mount pod, created if missing. A mount pod on its
// way out is Unavailable: the CO retries once it is gone and a new one can be made.
func (d *Driver) ensureMountPod(ctx context.Context, handle string) (*corev1.Pod, error) {
	pods := d.cfg.Client.CoreV1().Pods(d.cfg.Namespace)
	name := mountPodName(d.cfg.NodeID, handle)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		pod, err = pods.Create(ctx, mountPodSpec(d.cfg, handle), metav1.CreateOptions{})
		if err == nil {
			klog.FromContext(ctx).Info("Created mount pod", "pod", klog.KObj(pod), "volumeID", handle)
		} else if apierrors.IsAlreadyExists(err) {
			pod, err = pods.Get(ctx, name, metav1.GetOptions{})
		}
	}
	switch {
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "mount pod %s/%s: %v", d.cfg.Namespace, name, err)
	case pod.Annotations[AnnotationHandle] != handle:
		return nil, status.Errorf(codes.Internal, "mount pod %s/%s serves volume %q, not %q", pod.Namespace, pod.Name, pod.Annotations[AnnotationHandle], handle)
	case pod.DeletionTimestamp != nil:
		return nil, status.Errorf(codes.Unavailable, "mount pod %s/%s is terminating", pod.Namespace, pod.Name)
	}
	return pod, nil
}

// waitReady polls the mount pod until it is Ready, for at most cfg.ReadyTimeout: well
// below the CO's own deadline on the call, so that the CO hears why and retries.
func (d *Driver) waitReady(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ReadyTimeout)
	defer cancel()
	pods := d.cfg.Client.CoreV1().Pods(pod.Namespace)
	tick := time.NewTicker(d.cfg.PollInterval)
	defer tick.Stop()
	for !podReady(pod) {
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.Unavailable, "mount pod %s/%s is not ready after %v (phase %s)", pod.Namespace, pod.Name, d.cfg.ReadyTimeout, pod.Status.Phase)
		case <-tick.C:
		}
		got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && got.UID != pod.UID):
			return nil, status.Errorf(codes.Unavailable, "mount pod %s/%s went away while starting", pod.Namespace, pod.Name)
		case err == nil:
			pod = got
		}
	}
	return pod, nil
}

// deleteAndWait deletes the mount pod and waits, for at most cfg.GoneTimeout, until the
// apiserver has forgotten it: the CO has stopped its container.
func (d *Driver) deleteAndWait(ctx context.Context, pod *corev1.Pod) error {
	pods := d.cfg.Client.CoreV1().Pods(pod.Namespace)
	if pod.DeletionTimestamp == nil {
		err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return status.Errorf(codes.Unavailable, "delete mount pod %s/%s: %v", pod.Namespace, pod.Name, err)
		}
		klog.FromContext(ctx).Info("Deleted mount pod: no user left", "pod", klog.KObj(pod))
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.GoneTimeout)
	defer cancel()
	tick := time.NewTicker(d.cfg.PollInterval)
	defer tick.Stop()
	for {
		got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && got.UID != pod.UID) {
			return nil
		}
		select {
		case <-ctx.Done():
			return status.Errorf(codes.Unavailable, "mount pod %s/%s is still there after %v", pod.Namespace, pod.Name, d.cfg.GoneTimeout)
		case <-tick.C:
		}
	}
}

// mountPoint is where the volume's file system is mounted, as the driver sees it: the
// driver has the state dir at the host's path.
func (d *Driver) mountPoint(handle string) string {
	return filepath.Join(volumeDir(d.cfg.StateDir, d.cfg.NodeID, handle), "mnt")
}
