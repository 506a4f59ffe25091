package mock

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// TestSnapshots: a snapshot is cut of a known volume, ready at once, the same for a
// retried CreateSnapshot; listed by ID, by source and page by page; a volume restored from
// it has its size; deleted, it is gone, and deleting it again succeeds.
func TestSnapshots(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t)
	v := createVolume(t, d, "pvc-1")
	other := createVolume(t, d, "pvc-2")

	_, err := d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-x", SourceVolumeId: "mock-missing"})
	wantCode(t, "snapshot of an unknown volume", err, codes.NotFound)
	_, err = d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{SourceVolumeId: v.GetVolumeId()})
	wantCode(t, "snapshot without a name", err, codes.InvalidArgument)

	first, err := d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: v.GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	s := first.GetSnapshot()
	if !s.GetReadyToUse() || s.GetSizeBytes() != v.GetCapacityBytes() || s.GetSourceVolumeId() != v.GetVolumeId() || s.GetCreationTime() == nil {
		t.Errorf("snapshot %v", s)
	}
	again, err := d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: v.GetVolumeId()})
	if err != nil || again.GetSnapshot().GetSnapshotId() != s.GetSnapshotId() {
		t.Errorf("a repeated CreateSnapshot gave %v, %v; want snapshot %s", again, err, s.GetSnapshotId())
	}
	_, err = d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: other.GetVolumeId()})
	wantCode(t, "the same name of another volume", err, codes.AlreadyExists)
	if _, err := d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-2", SourceVolumeId: other.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}

	list := func(req *csi.ListSnapshotsRequest) (ids []string, next string) {
		t.Helper()
		resp, err := d.ListSnapshots(ctx, req)
		if err != nil {
			t.Fatalf("ListSnapshots(%v): %v", req, err)
		}
		for _, e := range resp.GetEntries() {
			ids = append(ids, e.GetSnapshot().GetSnapshotId())
		}
		return ids, resp.GetNextToken()
	}
	if ids, _ := list(&csi.ListSnapshotsRequest{SnapshotId: s.GetSnapshotId()}); len(ids) != 1 || ids[0] != s.GetSnapshotId() {
		t.Errorf("by ID: %v", ids)
	}
	if ids, _ := list(&csi.ListSnapshotsRequest{SourceVolumeId: other.GetVolumeId()}); len(ids) != 1 || ids[0] == s.GetSnapshotId() {
		t.Errorf("by source: %v", ids)
	}
	if ids, _ := list(&csi.ListSnapshotsRequest{SnapshotId: "mock-snap-none"}); len(ids) != 0 {
		t.Errorf("an unknown ID: %v", ids)
	}
	page1, next := list(&csi.ListSnapshotsRequest{MaxEntries: 1})
	page2, last := list(&csi.ListSnapshotsRequest{MaxEntries: 1, StartingToken: next})
	if len(page1) != 1 || len(page2) != 1 || page1[0] == page2[0] || next == "" || last != "" {
		t.Errorf("pages %v (next %q), %v (next %q)", page1, next, page2, last)
	}
	_, err = d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: "bogus"})
	wantCode(t, "a token the driver did not give", err, codes.Aborted)

	restored, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-restored", VolumeCapabilities: []*csi.VolumeCapability{mountCap},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: s.GetSnapshotId()}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := restored.GetVolume(); got.GetCapacityBytes() != s.GetSizeBytes() || got.GetContentSource().GetSnapshot().GetSnapshotId() != s.GetSnapshotId() {
		t.Errorf("restored volume %v", got)
	}
	_, err = d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-clone", VolumeCapabilities: []*csi.VolumeCapability{mountCap},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.GetVolumeId()}}}})
	wantCode(t, "a clone", err, codes.InvalidArgument)

	if _, err := d.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: s.GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := list(&csi.ListSnapshotsRequest{SnapshotId: s.GetSnapshotId()}); len(ids) != 0 {
		t.Errorf("deleted snapshot still listed: %v", ids)
	}
	if _, err := d.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: s.GetSnapshotId()}); err != nil {
		t.Errorf("deleting it again: %v", err)
	}
	_, err = d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-late", VolumeCapabilities: []*csi.VolumeCapability{mountCap},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: s.GetSnapshotId()}}}})
	wantCode(t, "restoring a deleted snapshot", err, codes.NotFound)
}
