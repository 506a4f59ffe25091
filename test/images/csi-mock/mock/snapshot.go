package mock

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// snapshot is what the driver knows of one snapshot: like the hostpath plugin's, it is
// cut at once and ready to use, and a volume restored from it gets its size.
type snapshot struct {
	id, name, source string
	size             int64
	created          time.Time
}

// snapshotID names the snapshot CreateSnapshot makes for name, the same for every retry.
func snapshotID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "mock-snap-" + hex.EncodeToString(sum[:8])
}

func (s *snapshot) csi() *csi.Snapshot {
	return &csi.Snapshot{SnapshotId: s.id, SourceVolumeId: s.source, SizeBytes: s.size,
		CreationTime: timestamppb.New(s.created), ReadyToUse: true}
}

// CreateSnapshot cuts a snapshot of a known volume. A second call with the same name
// returns the same snapshot, or AlreadyExists when it names another source volume.
func (d *Driver) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	switch {
	case req.GetName() == "":
		return nil, status.Error(codes.InvalidArgument, "snapshot name missing")
	case req.GetSourceVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "source volume ID missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.snapshots[snapshotID(req.GetName())]; ok {
		if s.source != req.GetSourceVolumeId() {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists of volume %q", req.GetName(), s.source)
		}
		return &csi.CreateSnapshotResponse{Snapshot: s.csi()}, nil
	}
	v, ok := d.volumes[req.GetSourceVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetSourceVolumeId())
	}
	s := &snapshot{id: snapshotID(req.GetName()), name: req.GetName(), source: v.id, size: v.capacity, created: time.Now()}
	d.snapshots[s.id] = s
	return &csi.CreateSnapshotResponse{Snapshot: s.csi()}, nil
}

// DeleteSnapshot forgets a snapshot; an unknown one is already deleted.
func (d *Driver) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot ID missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.snapshots, req.GetSnapshotId())
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists the snapshots by ID, those of one ID or of one source volume when
// asked, max_entries at a time; the next token is the index to go on from.
func (d *Driver) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "negative max_entries")
	}
	d.mu.Lock()
	var all []*snapshot
	for _, s := range d.snapshots {
		if (req.GetSnapshotId() == "" || s.id == req.GetSnapshotId()) && (req.GetSourceVolumeId() == "" || s.source == req.GetSourceVolumeId()) {
			all = append(all, s)
		}
	}
	d.mu.Unlock()
	slices.SortFunc(all, func(a, b *snapshot) int { return cmp.Compare(a.id, b.id) })
	start := 0
	if t := req.GetStartingToken(); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(all) {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not one this driver gave", t)
		}
		start = n
	}
	end := len(all)
	if m := int(req.GetMaxEntries()); m > 0 && start+m < end {
		end = start + m
	}
	resp := &csi.ListSnapshotsResponse{}
	for _, s := range all[start:end] {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: s.csi()})
	}
	if end < len(all) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}
