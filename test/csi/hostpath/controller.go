package hostpath

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"
)

// CreateVolume makes a volume, or returns the one already made under the request's name
// when it is compatible (AlreadyExists when it is not).
func (d *Driver) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	t, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources (snapshots, clones) are not supported")
	}
	block := t == accessBlock
	size, err := volumeSize(req.GetCapacityRange(), block, d.cfg.MaxVolumeSize)
	if err != nil {
		return nil, err
	}
	if !topologyAllows(req.GetAccessibilityRequirements(), d.cfg.TopologyKey, d.cfg.NodeID) {
		return nil, status.Errorf(codes.ResourceExhausted, "no requisite topology holds %s=%s", d.cfg.TopologyKey, d.cfg.NodeID)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if v := d.state.byName(req.GetName()); v != nil {
		if v.Block != block {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with another access type", req.GetName())
		}
		if !sizeFits(v.Size, req.GetCapacityRange()) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with %d bytes, outside the requested range", req.GetName(), v.Size)
		}
		return &csi.CreateVolumeResponse{Volume: d.csiVolume(v)}, nil
	}
	id, err := newVolumeID()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	v := &volume{ID: id, Name: req.GetName(), Size: size, Block: block}
	if err := d.makeVolumeData(v); err != nil {
		return nil, status.Errorf(codes.Internal, "make volume: %v", err)
	}
	d.state.Volumes[id] = v
	if err := d.state.save(); err != nil {
		delete(d.state.Volumes, id)
		_ = os.RemoveAll(d.volumePath(id))
		return nil, status.Errorf(codes.Internal, "save state: %v", err)
	}
	klog.FromContext(ctx).Info("Created volume", "volumeID", id, "name", v.Name, "bytes", size, "block", block)
	return &csi.CreateVolumeResponse{Volume: d.csiVolume(v)}, nil
}

// makeVolumeData makes a volume's directory, or its sparse backing file.
func (d *Driver) makeVolumeData(v *volume) error {
	p := d.volumePath(v.ID)
	if !v.Block {
		return os.MkdirAll(p, 0o777)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(v.Size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (d *Driver) csiVolume(v *volume) *csi.Volume {
	out := &csi.Volume{VolumeId: v.ID, CapacityBytes: v.Size}
	if seg := d.segment(); seg != nil {
		out.AccessibleTopology = []*csi.Topology{{Segments: seg}}
	}
	return out
}

// DeleteVolume removes a volume and its data. An unknown volume is already deleted; one
// that is still attached, staged or published is in use (FailedPrecondition).
func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.state.Volumes[req.GetVolumeId()]
	if v == nil || v.Ephemeral {
		return &csi.DeleteVolumeResponse{}, nil
	}
	switch {
	case v.AttachedTo != "":
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still published to node %s", v.ID, v.AttachedTo)
	case v.StagedAt != "":
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still staged at %s", v.ID, v.StagedAt)
	case len(v.Published) > 0:
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still published on the node", v.ID)
	}
	if err := d.removeVolume(v); err != nil {
		return nil, status.Errorf(codes.Internal, "delete volume: %v", err)
	}
	klog.FromContext(ctx).Info("Deleted volume", "volumeID", v.ID)
	return &csi.DeleteVolumeResponse{}, nil
}

// removeVolume removes a volume's data and record.
func (d *Driver) removeVolume(v *volume) error {
	if err := os.RemoveAll(d.volumePath(v.ID)); err != nil {
		return err
	}
	delete(d.state.Volumes, v.ID)
	return d.state.save()
}

// ControllerPublishVolume records that the volume is attached to this driver's node; there
// is nothing to attach. Volumes live on one node, so another node is NotFound.
func (d *Driver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if !d.cfg.EnableAttach {
		return nil, status.Error(codes.Unimplemented, "attach is not enabled")
	}
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetNodeId() == "":
		return nil, status.Error(codes.InvalidArgument, "node ID missing")
	}
	t, err := checkCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.state.Volumes[req.GetVolumeId()]
	if v == nil || v.Ephemeral {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if req.GetNodeId() != d.cfg.NodeID {
		return nil, status.Errorf(codes.NotFound, "node %s not found: this driver serves node %s", req.GetNodeId(), d.cfg.NodeID)
	}
	if why := fitsVolume(t, v); why != "" {
		return nil, status.Error(codes.InvalidArgument, why)
	}
	if v.AttachedTo == req.GetNodeId() {
		return &csi.ControllerPublishVolumeResponse{}, nil
	}
	if max := d.cfg.MaxVolumesPerNode; max > 0 && int64(d.state.attachedTo(req.GetNodeId())) >= max {
		return nil, status.Errorf(codes.ResourceExhausted, "node %s has the maximum of %d volumes attached", req.GetNodeId(), max)
	}
	v.AttachedTo = req.GetNodeId()
	if err := d.state.save(); err != nil {
		v.AttachedTo = ""
		return nil, status.Errorf(codes.Internal, "save state: %v", err)
	}
	klog.FromContext(ctx).Info("Attached volume", "volumeID", v.ID, "node", v.AttachedTo)
	return &csi.ControllerPublishVolumeResponse{}, nil
}

// ControllerUnpublishVolume forgets the attachment. An unknown volume, or one attached
// elsewhere, is already detached from the node.
func (d *Driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if !d.cfg.EnableAttach {
		return nil, status.Error(codes.Unimplemented, "attach is not enabled")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.state.Volumes[req.GetVolumeId()]
	if v == nil || v.AttachedTo == "" || (req.GetNodeId() != "" && req.GetNodeId() != v.AttachedTo) {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	node := v.AttachedTo
	v.AttachedTo = ""
	if err := d.state.save(); err != nil {
		v.AttachedTo = node
		return nil, status.Errorf(codes.Internal, "save state: %v", err)
	}
	klog.FromContext(ctx).Info("Detached volume", "volumeID", v.ID, "node", node)
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// ValidateVolumeCapabilities confirms the capabilities when the driver supports them all
// for this volume, and says why not otherwise.
func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	d.mu.Lock()
	v := d.state.Volumes[req.GetVolumeId()]
	d.mu.Unlock()
	if v == nil || v.Ephemeral {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	t, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	if why := fitsVolume(t, v); why != "" {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: why}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// ListVolumes pages through the volumes in ID order; the token is the index of the next
// entry, and any other token is Aborted.
func (d *Driver) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries is negative")
	}
	d.mu.Lock()
	vols := d.state.controllerVolumes()
	entries := make([]*csi.ListVolumesResponse_Entry, 0, len(vols))
	for _, v := range vols {
		entries = append(entries, &csi.ListVolumesResponse_Entry{Volume: d.csiVolume(v)})
	}
	d.mu.Unlock()
	page, next, err := pageOf(entries, req.GetStartingToken(), int(req.GetMaxEntries()))
	if err != nil {
		return nil, status.Error(codes.Aborted, err.Error())
	}
	return &csi.ListVolumesResponse{Entries: page, NextToken: next}, nil
}

// pageOf returns the page of entries that starts at token (an index, "" for the first) and
// holds at most max entries (0 is all), and the token of the next page, "" after the last.
func pageOf[T any](entries []T, token string, max int) ([]T, string, error) {
	start := 0
	if token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(entries) {
			return nil, "", fmt.Errorf("starting token %q is not valid", token)
		}
		start = n
	}
	end := len(entries)
	if max > 0 && start+max < end {
		end = start + max
	}
	next := ""
	if end < len(entries) {
		next = strconv.Itoa(end)
	}
	return entries[start:end], next, nil
}

// GetCapacity reports the free space of the state dir's file system.
func (d *Driver) GetCapacity(_ context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if len(req.GetVolumeCapabilities()) > 0 {
		if _, err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
			return &csi.GetCapacityResponse{}, nil
		}
	}
	if seg := d.segment(); seg != nil && req.GetAccessibleTopology() != nil &&
		req.GetAccessibleTopology().GetSegments()[d.cfg.TopologyKey] != d.cfg.NodeID {
		return &csi.GetCapacityResponse{}, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.cfg.StateDir, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", d.cfg.StateDir, err)
	}
	free := int64(st.Bavail) * st.Bsize
	return &csi.GetCapacityResponse{
		AvailableCapacity: free,
		MaximumVolumeSize: wrapperspb.Int64(d.cfg.MaxVolumeSize),
	}, nil
}

// ControllerGetCapabilities lists the controller RPCs the driver serves.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	}
	if d.cfg.EnableAttach {
		types = append(types, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
	}
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range types {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}
