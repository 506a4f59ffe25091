package hostpath

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// TestExpandBlockVolume: the controller grows the backing file, the node tells the loop
// device; a smaller request shrinks nothing; paths and volumes unknown are NotFound.
func TestExpandBlockVolume(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := capOf(rwo, true)
	v := f.create(t, "block", c)
	file := filepath.Join(f.cfg.StateDir, v.VolumeId)
	if err := f.stage(v.VolumeId, c); err != nil {
		t.Fatal(err)
	}
	if err := f.publish(v.VolumeId, c, f.target, false); err != nil {
		t.Fatal(err)
	}
	resp, err := f.d.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}})
	if err != nil || resp.GetCapacityBytes() != 2<<20 || !resp.GetNodeExpansionRequired() {
		t.Fatalf("ControllerExpandVolume = %v, %v", resp, err)
	}
	if st, err := os.Stat(file); err != nil || st.Size() != 2<<20 {
		t.Fatalf("backing file after expansion: %v", err)
	}
	nresp, err := f.d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: v.VolumeId, VolumePath: f.target,
		StagingTargetPath: f.staging, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}, VolumeCapability: c})
	if err != nil || nresp.GetCapacityBytes() != 2<<20 {
		t.Fatalf("NodeExpandVolume = %v, %v", nresp, err)
	}
	if !reflect.DeepEqual(f.l.resized, []string{f.l.bound[file]}) {
		t.Errorf("loop devices resized: %v", f.l.resized)
	}
	// The node alone may grow it too (a resizer that skipped the controller).
	if _, err := f.d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: v.VolumeId, VolumePath: f.target,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 3 << 20}}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(file); err != nil || st.Size() != 3<<20 {
		t.Fatalf("backing file after node expansion: %v", err)
	}
	resp, err = f.d.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}})
	if err != nil || resp.GetCapacityBytes() != 3<<20 {
		t.Errorf("smaller request = %v, %v; want the current size", resp, err)
	}
	_, err = f.d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: v.VolumeId, VolumePath: "/elsewhere"})
	wantCode(t, "unknown path", err, codes.NotFound)
	_, err = f.d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "nope", VolumePath: f.target})
	wantCode(t, "unknown volume", err, codes.NotFound)
	_, err = f.d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: v.VolumeId})
	wantCode(t, "no path", err, codes.InvalidArgument)
	_, err = f.d.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId})
	wantCode(t, "no range", err, codes.InvalidArgument)
}

// TestExpandMountVolume: a directory's new capacity is recorded and survives a restart.
func TestExpandMountVolume(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := capOf(rwo, false)
	v := f.create(t, "dir", c)
	if err := f.stage(v.VolumeId, c); err != nil {
		t.Fatal(err)
	}
	if err := f.publish(v.VolumeId, c, f.target, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: v.VolumeId, VolumePath: f.target,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 5 << 20}, VolumeCapability: c}); err != nil {
		t.Fatal(err)
	}
	f.restart(t)
	if got := f.d.state.Volumes[v.VolumeId].Size; got != 5<<20 {
		t.Errorf("size after restart = %d", got)
	}
	if len(f.l.resized) != 0 {
		t.Errorf("a directory has no loop device: %v", f.l.resized)
	}
}
