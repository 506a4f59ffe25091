package mock

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetCapabilities advertises STAGE_UNSTAGE_VOLUME and GET_VOLUME_STATS, and
// EXPAND_VOLUME when node expansion is on.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	rpc := func(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
		return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
	}
	caps := []*csi.NodeServiceCapability{
		rpc(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME),
		rpc(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS),
	}
	if d.cfg.NodeExpansion {
		caps = append(caps, rpc(csi.NodeServiceCapability_RPC_EXPAND_VOLUME))
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// NodeGetInfo returns the node ID, the attach limit and the node's segment.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.cfg.NodeID, MaxVolumesPerNode: d.cfg.AttachLimit, AccessibleTopology: d.segment()}, nil
}

// NodeStageVolume records that the volume is staged at the staging path. With attach
// enabled, the volume must have been published to the node first; a volume is staged at
// one path at a time.
func (d *Driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.volumes[req.GetVolumeId()]
	switch {
	case !ok:
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	case d.cfg.EnableAttach && !v.attached:
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is not published to node %q: ControllerPublishVolume first", v.id, d.cfg.NodeID)
	case v.stagedAt == req.GetStagingTargetPath():
		return &csi.NodeStageVolumeResponse{}, nil
	case v.stagedAt != "":
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is staged at %s", v.id, v.stagedAt)
	}
	v.stagedAt = req.GetStagingTargetPath()
	return &csi.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume records that the volume is no longer staged; it must be unpublished
// everywhere first. A volume the driver does not know, or one not staged there, is
// unstaged.
func (d *Driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.volumes[req.GetVolumeId()]
	if !ok || v.stagedAt != req.GetStagingTargetPath() {
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if len(v.published) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is still published at %d targets", v.id, len(v.published))
	}
	v.stagedAt = ""
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume makes the target directory and records the publication. A volume the
// node marks ephemeral is made here; any other must exist and be staged at the request's
// staging path.
func (d *Driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	ephemeral := req.GetVolumeContext()[ephemeralKey] == "true"
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.volumes[req.GetVolumeId()]
	switch {
	case !ok && ephemeral:
		v = &volume{id: req.GetVolumeId(), name: "ephemeral-" + req.GetVolumeId(), capacity: ephemeralCapacity, ephemeral: true, published: map[string]bool{}}
	case !ok:
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	case !v.ephemeral && v.stagedAt == "":
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q must be staged before it is published", v.id)
	case !v.ephemeral && v.stagedAt != req.GetStagingTargetPath():
		return nil, status.Errorf(codes.InvalidArgument, "volume %q is staged at %s, not at %q", v.id, v.stagedAt, req.GetStagingTargetPath())
	}
	if v.published[req.GetTargetPath()] {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(req.GetTargetPath(), 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "make the target directory: %v", err)
	}
	v.published[req.GetTargetPath()] = true
	if v.ephemeral {
		d.volumes[v.id] = v
		d.byName[v.name] = v.id
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume removes the target directory, with what the pod wrote there, and
// the publication; an ephemeral volume goes with its last target. A volume the driver
// does not know, or one not published there, is unpublished.
func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.volumes[req.GetVolumeId()]
	if !ok || !v.published[req.GetTargetPath()] {
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	if err := os.RemoveAll(req.GetTargetPath()); err != nil {
		return nil, status.Errorf(codes.Internal, "remove the target directory: %v", err)
	}
	delete(v.published, req.GetTargetPath())
	if v.ephemeral && len(v.published) == 0 {
		d.forget(v.id)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports the volume's capacity as its size, all of it free.
func (d *Driver) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "volume path missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	if err := pathExists(req.GetVolumePath()); err != nil {
		return nil, err
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{
		Unit: csi.VolumeUsage_BYTES, Total: v.capacity, Available: v.capacity,
	}}}, nil
}

// NodeExpandVolume grows a known volume to the required size.
func (d *Driver) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if !d.cfg.NodeExpansion {
		return nil, status.Error(codes.Unimplemented, "NodeExpandVolume: node expansion is not enabled")
	}
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "volume path missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	v.capacity = max(v.capacity, req.GetCapacityRange().GetRequiredBytes())
	return &csi.NodeExpandVolumeResponse{CapacityBytes: v.capacity}, nil
}

// pathExists is NotFound for a missing path.
func pathExists(p string) error {
	_, err := os.Stat(p)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrNotExist):
		return status.Errorf(codes.NotFound, "volume path %s does not exist", p)
	default:
		return status.Error(codes.Internal, fmt.Sprintf("stat the volume path: %v", err))
	}
}
