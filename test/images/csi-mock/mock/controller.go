package mock

import (
	"context"
	"maps"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ControllerGetCapabilities advertises what the controller service implements:
// CREATE_DELETE_VOLUME, CREATE_DELETE_SNAPSHOT and LIST_SNAPSHOTS always (as the hostpath
// plugin does), PUBLISH_UNPUBLISH_VOLUME and EXPAND_VOLUME as configured. Nothing else, so
// that no sidecar calls what the mock does not answer.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	rpc := func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}}
	}
	caps := []*csi.ControllerServiceCapability{
		rpc(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME),
		rpc(csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT),
		rpc(csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS),
	}
	if d.cfg.EnableAttach {
		caps = append(caps, rpc(csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME))
	}
	if d.cfg.ControllerExpansion {
		caps = append(caps, rpc(csi.ControllerServiceCapability_RPC_EXPAND_VOLUME))
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// CreateVolume makes a volume of the required size (1 GiB when none is asked for), in the
// node's segment when the driver is topology-aware; its volume context is the request's
// parameters; one restored from a snapshot is at least the snapshot's size. A second call
// with the same name returns the same volume, or AlreadyExists when it asks for more than
// the volume has.
func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume name missing")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	src := req.GetVolumeContentSource()
	if src != nil && src.GetSnapshot() == nil {
		return nil, status.Error(codes.InvalidArgument, "only snapshots can be a volume's content source: the driver does not advertise clones")
	}
	required, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	switch {
	case required < 0 || limit < 0:
		return nil, status.Error(codes.InvalidArgument, "negative capacity")
	case limit > 0 && required > limit:
		return nil, status.Errorf(codes.InvalidArgument, "required capacity %d exceeds the limit %d", required, limit)
	}
	capacity := required
	if capacity == 0 {
		capacity = limit
	}
	if capacity == 0 {
		capacity = defaultCapacity
	}
	if capacity > d.cfg.MaxVolumeSize {
		return nil, status.Errorf(codes.OutOfRange, "capacity %d exceeds the largest volume, %d", capacity, d.cfg.MaxVolumeSize)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	var from *snapshot
	if src != nil {
		id := src.GetSnapshot().GetSnapshotId()
		if from = d.snapshots[id]; from == nil {
			return nil, status.Errorf(codes.NotFound, "snapshot %q not found", id)
		}
		if limit > 0 && from.size > limit {
			return nil, status.Errorf(codes.OutOfRange, "snapshot %q has %d bytes, over the limit %d", id, from.size, limit)
		}
		capacity = max(capacity, from.size)
	}
	if id, ok := d.byName[req.GetName()]; ok {
		v := d.volumes[id]
		if v.capacity < required || (limit > 0 && v.capacity > limit) || v.source.GetSnapshot().GetSnapshotId() != src.GetSnapshot().GetSnapshotId() {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with %d bytes, of another source or none", req.GetName(), v.capacity)
		}
		return &csi.CreateVolumeResponse{Volume: d.csiVolume(v)}, nil
	}
	v := &volume{
		id:        volumeID(req.GetName()),
		source:    src,
		name:      req.GetName(),
		capacity:  capacity,
		context:   maps.Clone(req.GetParameters()),
		published: map[string]bool{},
	}
	d.volumes[v.id] = v
	d.byName[v.name] = v.id
	return &csi.CreateVolumeResponse{Volume: d.csiVolume(v)}, nil
}

func (d *Driver) csiVolume(v *volume) *csi.Volume {
	out := &csi.Volume{VolumeId: v.id, CapacityBytes: v.capacity, VolumeContext: maps.Clone(v.context), ContentSource: v.source}
	if seg := d.segment(); seg != nil {
		out.AccessibleTopology = []*csi.Topology{seg}
	}
	return out
}

// DeleteVolume forgets the volume, also one the node still uses (see the package comment);
// an unknown volume is already deleted.
func (d *Driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forget(req.GetVolumeId())
	return &csi.DeleteVolumeResponse{}, nil
}

// forget drops a volume; d.mu is held.
func (d *Driver) forget(id string) {
	if v, ok := d.volumes[id]; ok {
		delete(d.byName, v.name)
		delete(d.volumes, id)
	}
}

// ControllerPublishVolume attaches a volume to the driver's node, within the attach limit.
func (d *Driver) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if !d.cfg.EnableAttach {
		return nil, status.Error(codes.Unimplemented, "ControllerPublishVolume: attach is not enabled")
	}
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetNodeId() == "":
		return nil, status.Error(codes.InvalidArgument, "node ID missing")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	if req.GetNodeId() != d.cfg.NodeID {
		return nil, status.Errorf(codes.NotFound, "node %q: the driver serves node %q only", req.GetNodeId(), d.cfg.NodeID)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	if !v.attached {
		if d.cfg.AttachLimit > 0 && d.attachedCount() >= d.cfg.AttachLimit {
			return nil, status.Errorf(codes.ResourceExhausted, "node %q has %d volumes attached, its limit", d.cfg.NodeID, d.cfg.AttachLimit)
		}
		v.attached = true
	}
	return &csi.ControllerPublishVolumeResponse{}, nil
}

func (d *Driver) attachedCount() int64 {
	var n int64
	for _, v := range d.volumes {
		if v.attached {
			n++
		}
	}
	return n
}

// ControllerUnpublishVolume detaches a volume; an unknown or detached one is detached.
func (d *Driver) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if !d.cfg.EnableAttach {
		return nil, status.Error(codes.Unimplemented, "ControllerUnpublishVolume: attach is not enabled")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	if n := req.GetNodeId(); n != "" && n != d.cfg.NodeID {
		return nil, status.Errorf(codes.NotFound, "node %q: the driver serves node %q only", n, d.cfg.NodeID)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.volumes[req.GetVolumeId()]; ok {
		v.attached = false
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// ValidateVolumeCapabilities confirms any well-formed capabilities of a known volume.
func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.volumes[req.GetVolumeId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// ControllerExpandVolume grows a volume to the required size, and says whether the node
// must expand it too.
func (d *Driver) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if !d.cfg.ControllerExpansion {
		return nil, status.Error(codes.Unimplemented, "ControllerExpandVolume: controller expansion is not enabled")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if size > d.cfg.MaxVolumeSize {
		return nil, status.Errorf(codes.OutOfRange, "capacity %d exceeds the largest volume, %d", size, d.cfg.MaxVolumeSize)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	v.capacity = max(v.capacity, size)
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.capacity, NodeExpansionRequired: d.cfg.NodeExpansion}, nil
}

// checkCapabilities accepts a non-empty list of capabilities, each with an access mode and
// the mount access type: the mock makes directories, never block devices.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	for _, c := range caps {
		switch {
		case c == nil:
			return status.Error(codes.InvalidArgument, "volume capability missing")
		case c.GetAccessMode() == nil:
			return status.Error(codes.InvalidArgument, "volume capability without an access mode")
		case c.GetBlock() != nil:
			return status.Error(codes.InvalidArgument, "block volumes are not supported: the mock makes directories")
		case c.GetMount() == nil:
			return status.Error(codes.InvalidArgument, "volume capability without an access type")
		}
	}
	return nil
}
