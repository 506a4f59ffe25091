package mountpod

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// NodeGetInfo returns the node ID.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.cfg.NodeID}, nil
}

// NodeGetCapabilities lists no node RPC beyond publish: there is no staging, the mount
// pod is what a staging step would be.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NodePublishVolume makes (or reuses) the volume's mount pod on this node, waits until it
// is Ready, bind-mounts the file system it serves onto the target path, which it creates,
// and records the target as a user of the mount pod.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	handle := req.GetVolumeId()
	switch {
	case handle == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume capability missing")
	case req.GetVolumeCapability().GetMount() == nil:
		return nil, status.Error(codes.InvalidArgument, "only mount access is served")
	}
	target := filepath.Clean(req.GetTargetPath())
	readOnly := req.GetReadonly() || readerOnly(req.GetVolumeCapability().GetAccessMode().GetMode())
	logger := klog.FromContext(ctx).WithValues("volumeID", handle, "target", target)
	defer d.lockVolume(handle)()

	pod, err := d.ensureMountPod(ctx, handle)
	if err != nil {
		return nil, err
	}
	if pod, err = d.waitReady(ctx, pod); err != nil {
		return nil, err
	}
	source := d.mountPoint(handle)
	if served, err := d.mount.IsMountPoint(source); err != nil || !served {
		return nil, status.Errorf(codes.Unavailable, "mount pod %s/%s is ready but nothing is mounted at %s (%v)", pod.Namespace, pod.Name, source, err)
	}
	mounted, err := d.mount.IsMountPoint(target)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if !mounted {
		if err := makeTarget(target); err != nil {
			return nil, err
		}
		if err := d.mount.Bind(source, target, readOnly); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if err := d.updateRefs(ctx, pod, func(p *corev1.Pod) bool { return addRef(p, target) }); err != nil {
		if !mounted {
			_ = d.mount.Unmount(target)
		}
		return nil, status.Errorf(codes.Unavailable, "record user of mount pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	logger.Info("Published volume", "mountPod", klog.KObj(pod), "readOnly", readOnly)
	return &csi.NodePublishVolumeResponse{}, nil
}

// readerOnly says whether an access mode allows reading only.
func readerOnly(m csi.VolumeCapability_AccessMode_Mode) bool {
	return m == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY || m == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// makeTarget creates the target directory. Its parent is the CO's to make.
func makeTarget(target string) error {
	if _, err := os.Stat(filepath.Dir(target)); err != nil {
		return status.Errorf(codes.FailedPrecondition, "parent of target path %s: %v (the CO makes it)", target, err)
	}
	if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return status.Errorf(codes.Internal, "make target path: %v", err)
	}
	return nil
}

// NodeUnpublishVolume unmounts and removes the target path and drops it from the mount
// pod's users. The last user out deletes the mount pod, waits until it is gone, and
// removes the volume's directory. Unpublishing what is not published succeeds.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	handle := req.GetVolumeId()
	switch {
	case handle == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	target := filepath.Clean(req.GetTargetPath())
	logger := klog.FromContext(ctx).WithValues("volumeID", handle, "target", target)
	defer d.lockVolume(handle)()

	if err := d.mount.Unmount(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove target path: %v", err)
	}
	pods := d.cfg.Client.CoreV1().Pods(d.cfg.Namespace)
	pod, err := pods.Get(ctx, mountPodName(d.cfg.NodeID, handle), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, status.Errorf(codes.Unavailable, "get mount pod: %v", err)
	}
	if err == nil {
		if err := d.updateRefs(ctx, pod, func(p *corev1.Pod) bool { return dropRef(p, target) }); err != nil {
			return nil, status.Errorf(codes.Unavailable, "drop user of mount pod %s/%s: %v", pod.Namespace, pod.Name, err)
		}
		if users := Users(pod); len(users) > 0 {
			logger.Info("Unpublished volume", "mountPod", klog.KObj(pod), "usersLeft", len(users))
			return &csi.NodeUnpublishVolumeResponse{}, nil
		}
		if err := d.deleteAndWait(ctx, pod); err != nil {
			return nil, err
		}
	}
	if err := d.removeVolumeDir(handle); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	logger.Info("Unpublished volume; its mount pod is gone", "mountPod", mountPodName(d.cfg.NodeID, handle))
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// removeVolumeDir unmounts what a mount pod that did not stop cleanly left mounted and
// removes the volume's directory. It removes empty directories only: a volume's
// directory holds nothing of its own once its file system is unmounted.
func (d *Driver) removeVolumeDir(handle string) error {
	mnt := d.mountPoint(handle)
	if err := d.mount.Unmount(mnt); err != nil {
		return err
	}
	for _, p := range []string{mnt, filepath.Dir(mnt)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// updateRefs applies change to the mount pod's annotations and writes them, again on a
// conflict with another writer (the CO's status updates do not conflict: they go to the
// status subresource). pod is updated in place to what was written.
func (d *Driver) updateRefs(ctx context.Context, pod *corev1.Pod, change func(*corev1.Pod) bool) error {
	pods := d.cfg.Client.CoreV1().Pods(pod.Namespace)
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := pod
		if !first {
			got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = got
		}
		first = false
		if !change(cur) {
			*pod = *cur
			return nil
		}
		updated, err := pods.Update(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		*pod = *updated
		return nil
	})
}
