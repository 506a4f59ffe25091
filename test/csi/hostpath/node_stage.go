package hostpath

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// NodeStageVolume bind-mounts a mount volume's directory on the staging path, or
// attaches a block volume's file to a loop device (the staging path is then left alone).
// Staging again at the same path is a no-op that repairs a lost mount or loop device.
func (d *Driver) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	}
	t, err := checkCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	staging := filepath.Clean(req.GetStagingTargetPath())
	time.Sleep(d.cfg.SlowNodeCalls)
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.state.Volumes[req.GetVolumeId()]
	if v == nil || v.Ephemeral {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if why := fitsVolume(t, v); why != "" {
		return nil, status.Error(codes.InvalidArgument, why)
	}
	if v.StagedAt != "" && v.StagedAt != staging {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is staged at %s already", v.ID, v.StagedAt)
	}
	if other := d.state.claimant(staging); other != nil && other != v {
		return nil, status.Errorf(codes.FailedPrecondition, "staging path %s is in use by volume %s", staging, other.ID)
	}
	logger := klog.FromContext(ctx)
	if v.Block {
		dev, err := d.ensureLoop(v)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "attach loop device: %v", err)
		}
		v.LoopDevice = dev
	} else {
		if _, err := os.Stat(staging); os.IsNotExist(err) {
			// The CO makes the staging path; make it rather than fail, but say so.
			logger.Info("Staging path did not exist; making it", "path", staging)
			if err := os.MkdirAll(staging, 0o750); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
		mounted, err := d.mount.IsMountPoint(staging)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if !mounted {
			if err := d.mount.Bind(d.volumePath(v.ID), staging, nil); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
	}
	v.StagedAt = staging
	if err := d.state.save(); err != nil {
		return nil, status.Errorf(codes.Internal, "save state: %v", err)
	}
	logger.Info("Staged volume", "volumeID", v.ID, "path", staging, "loopDevice", v.LoopDevice)
	return &csi.NodeStageVolumeResponse{}, nil
}

// ensureLoop returns the loop device v's file is bound to, binding it if it is not (a
// driver restarted after a reboot finds its recorded device gone).
func (d *Driver) ensureLoop(v *volume) (string, error) {
	file := d.volumePath(v.ID)
	dev, err := d.loops.Find(file)
	if err != nil || dev != "" {
		return dev, err
	}
	return d.loops.Attach(file)
}

// NodeUnstageVolume undoes NodeStageVolume. A volume not staged at the path is unstaged
// already; one still published is in use (FailedPrecondition).
func (d *Driver) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	}
	staging := filepath.Clean(req.GetStagingTargetPath())
	time.Sleep(d.cfg.SlowNodeCalls)
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.state.Volumes[req.GetVolumeId()]
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if v.StagedAt != staging {
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if len(v.Published) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still published at %d target path(s)", v.ID, len(v.Published))
	}
	if v.Block {
		for _, dev := range []string{v.LoopDevice, d.mustFind(v)} {
			if dev == "" {
				continue
			}
			if err := d.loops.Detach(dev); err != nil {
				return nil, status.Errorf(codes.Internal, "detach loop device: %v", err)
			}
		}
		v.LoopDevice = ""
	} else if err := d.mount.Unmount(staging); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	v.StagedAt = ""
	if err := d.state.save(); err != nil {
		return nil, status.Errorf(codes.Internal, "save state: %v", err)
	}
	klog.FromContext(ctx).Info("Unstaged volume", "volumeID", v.ID, "path", staging)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// mustFind returns the loop device bound to v's file other than the recorded one, "" if
// none or on error: unstaging detaches what a crash may have left unrecorded.
func (d *Driver) mustFind(v *volume) string {
	dev, err := d.loops.Find(d.volumePath(v.ID))
	if err != nil || dev == v.LoopDevice {
		return ""
	}
	return dev
}
