package hostpath

import (
	"context"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// ControllerExpandVolume grows a volume: a mount volume's recorded capacity, a block
// volume's backing file. It never shrinks one: a smaller request returns the current
// size. The node still has to take the new size in (a loop device's capacity), so it
// always asks for NodeExpandVolume.
func (d *Driver) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity range missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.state.Volumes[req.GetVolumeId()]
	if v == nil || v.Ephemeral {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	size, err := d.grow(ctx, v, req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: true}, nil
}

// NodeExpandVolume takes a volume's new size in on the node, at a path where it is
// published or staged: a block volume's backing file grows (if the controller did not
// grow it yet) and its loop device is told its new capacity (LOOP_SET_CAPACITY); a mount
// volume's new capacity is recorded.
func (d *Driver) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "volume path missing")
	}
	if c := req.GetVolumeCapability(); c != nil {
		if _, err := checkCapability(c); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.state.Volumes[req.GetVolumeId()]
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	p := filepath.Clean(req.GetVolumePath())
	if _, published := v.Published[p]; !published && p != v.StagedAt {
		return nil, status.Errorf(codes.NotFound, "volume %s is neither published nor staged at %s", v.ID, p)
	}
	size, err := d.grow(ctx, v, req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	if v.Block && v.LoopDevice != "" {
		if err := d.loops.Resize(v.LoopDevice); err != nil {
			return nil, status.Errorf(codes.Internal, "resize loop device %s: %v", v.LoopDevice, err)
		}
	}
	klog.FromContext(ctx).Info("Expanded volume on the node", "volumeID", v.ID, "path", p, "bytes", size,
		"requiredBytes", req.GetCapacityRange().GetRequiredBytes(), "stagingPath", req.GetStagingTargetPath())
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// grow raises v's size to what r asks for, if more, and saves it. The caller holds d.mu.
func (d *Driver) grow(ctx context.Context, v *volume, r *csi.CapacityRange) (int64, error) {
	if r == nil || r.GetRequiredBytes() <= v.Size {
		if l := r.GetLimitBytes(); l > 0 && l < v.Size {
			return 0, status.Errorf(codes.OutOfRange, "volume %s has %d bytes, more than the limit of %d: it cannot shrink", v.ID, v.Size, l)
		}
		return v.Size, nil
	}
	size, err := volumeSize(r, v.Block, d.cfg.MaxVolumeSize)
	if err != nil {
		return 0, err
	}
	if v.Block {
		if err := os.Truncate(d.volumePath(v.ID), size); err != nil {
			return 0, status.Errorf(codes.Internal, "grow %s: %v", v.ID, err)
		}
	}
	old := v.Size
	v.Size = size
	if err := d.state.save(); err != nil {
		v.Size = old
		return 0, status.Errorf(codes.Internal, "save state: %v", err)
	}
	klog.FromContext(ctx).Info("Grew volume", "volumeID", v.ID, "from", old, "to", size)
	return size, nil
}
