package hostpath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
)

// Volume context keys the kubelet sets on inline ephemeral volumes, and the one this
// driver reads for their size.
const (
	EphemeralContextKey = "csi.storage.k8s.io/ephemeral"
	SizeContextKey      = "size"
)

// NodePublishVolume bind-mounts the staging path (a block volume's loop device) on the
// target path, which it creates: a directory for a mount volume, a file for a block
// volume. The parent of the target path must exist. An inline ephemeral volume has no
// staging: its directory is made here and bind-mounted directly.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	time.Sleep(d.cfg.SlowNodeCalls)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed < d.cfg.FailNodePublish {
		d.failed++
		return nil, status.Errorf(codes.Unavailable, "injected failure %d of %d", d.failed, d.cfg.FailNodePublish)
	}
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	t, err := checkCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	target := filepath.Clean(req.GetTargetPath())
	if req.GetVolumeContext()[EphemeralContextKey] == "true" {
		if t != accessMount {
			return nil, status.Error(codes.InvalidArgument, "inline ephemeral volumes have mount access only")
		}
		return d.publishEphemeral(ctx, req, target)
	}
	v := d.state.Volumes[req.GetVolumeId()]
	if v == nil || v.Ephemeral {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if why := fitsVolume(t, v); why != "" {
		return nil, status.Error(codes.InvalidArgument, why)
	}
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path missing: the driver has STAGE_UNSTAGE_VOLUME")
	}
	if staging := filepath.Clean(req.GetStagingTargetPath()); v.StagedAt != staging {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", v.ID, staging)
	}
	source := v.StagedAt
	if v.Block {
		if v.LoopDevice == "" {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s has no loop device: stage it again", v.ID)
		}
		source = v.LoopDevice
	}
	return d.publish(ctx, v, source, target, req)
}

// publishEphemeral makes an inline ephemeral volume (once) and publishes it.
func (d *Driver) publishEphemeral(ctx context.Context, req *csi.NodePublishVolumeRequest, target string) (*csi.NodePublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if !validID(id) {
		return nil, status.Errorf(codes.InvalidArgument, "volume ID %q cannot name a directory", id)
	}
	v := d.state.Volumes[id]
	if v != nil && !v.Ephemeral {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s is a provisioned volume, not an inline ephemeral one", id)
	}
	if v != nil {
		for other := range v.Published {
			if other != target {
				return nil, status.Errorf(codes.FailedPrecondition, "inline ephemeral volume %s is published at %s already", id, other)
			}
		}
	}
	if v == nil {
		var size int64
		if s := req.GetVolumeContext()[SizeContextKey]; s != "" {
			q, err := resource.ParseQuantity(s)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "volume attribute %s=%q: %v", SizeContextKey, s, err)
			}
			size = q.Value()
		}
		v = &volume{ID: id, Name: id, Size: size, Ephemeral: true}
		if err := d.makeVolumeData(v); err != nil {
			return nil, status.Errorf(codes.Internal, "make volume: %v", err)
		}
		d.state.Volumes[id] = v
		klog.FromContext(ctx).Info("Created inline ephemeral volume", "volumeID", id, "pod", req.GetVolumeContext()["csi.storage.k8s.io/pod.name"])
	}
	resp, err := d.publish(ctx, v, d.volumePath(id), target, req)
	if err != nil && len(v.Published) == 0 {
		_ = d.removeVolume(v)
	}
	return resp, err
}

// publish bind-mounts source on target for v, or confirms an earlier identical publish.
func (d *Driver) publish(ctx context.Context, v *volume, source, target string, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	c := req.GetVolumeCapability()
	opts := bindOptions(c, req.GetReadonly())
	readOnly := slices.Contains(opts, "ro")
	if p, ok := v.Published[target]; ok {
		if p.ReadOnly != readOnly {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is published at %s with read-only=%v", v.ID, target, p.ReadOnly)
		}
		mounted, err := d.mount.IsMountPoint(target)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if mounted {
			return &csi.NodePublishVolumeResponse{}, nil
		}
	}
	if why := publishConflict(v, target, c); why != "" {
		return nil, status.Error(codes.FailedPrecondition, why)
	}
	if other := d.state.claimant(target); other != nil && other != v {
		return nil, status.Errorf(codes.AlreadyExists, "target path %s is in use by volume %s", target, other.ID)
	}
	if err := makeTarget(target, v.Block); err != nil {
		return nil, err
	}
	if err := d.mount.Bind(source, target, opts); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if v.Published == nil {
		v.Published = map[string]publication{}
	}
	v.Published[target] = publication{ReadOnly: readOnly, SingleWriter: isSingleWriter(c)}
	if err := d.state.save(); err != nil {
		delete(v.Published, target)
		_ = d.mount.Unmount(target)
		return nil, status.Errorf(codes.Internal, "save state: %v", err)
	}
	klog.FromContext(ctx).Info("Published volume", "volumeID", v.ID, "target", target, "options", opts)
	return &csi.NodePublishVolumeResponse{}, nil
}

// makeTarget creates the target path, a directory or (for a block volume) a file. Its
// parent is the CO's to make: a missing parent is FailedPrecondition.
func makeTarget(target string, block bool) error {
	if _, err := os.Stat(filepath.Dir(target)); err != nil {
		return status.Errorf(codes.FailedPrecondition, "parent of target path %s: %v (the CO makes it)", target, err)
	}
	var err error
	if block {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o660); err == nil {
			err = f.Close()
		}
	} else if err = os.Mkdir(target, 0o750); errors.Is(err, os.ErrExist) {
		var st os.FileInfo
		if st, err = os.Stat(target); err == nil && !st.IsDir() {
			err = fmt.Errorf("%s exists and is not a directory", target)
		}
	}
	if err != nil {
		return status.Errorf(codes.Internal, "make target path: %v", err)
	}
	return nil
}

// NodeUnpublishVolume unmounts and removes the target path, and removes an inline
// ephemeral volume once it is published nowhere. An unknown volume is NotFound, after
// whatever is mounted at a target no volume claims has been cleaned up.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	target := filepath.Clean(req.GetTargetPath())
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.state.Volumes[req.GetVolumeId()]
	claim := d.state.claimant(target)
	if claim != nil && claim != v {
		// Another volume's target: nothing of this volume is there.
		if v == nil {
			return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
		}
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	if err := d.mount.Unmount(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove target path: %v", err)
	}
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if _, ok := v.Published[target]; !ok {
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	delete(v.Published, target)
	logger := klog.FromContext(ctx)
	if v.Ephemeral && len(v.Published) == 0 {
		if err := d.removeVolume(v); err != nil {
			return nil, status.Errorf(codes.Internal, "remove inline ephemeral volume: %v", err)
		}
		logger.Info("Removed inline ephemeral volume", "volumeID", v.ID)
	} else if err := d.state.save(); err != nil {
		return nil, status.Errorf(codes.Internal, "save state: %v", err)
	}
	logger.Info("Unpublished volume", "volumeID", v.ID, "target", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
