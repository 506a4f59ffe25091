//go:build e2e

package csisanity

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nodeagent/nodeagent/test/csi/hostpath"
)

// client is the controller and node services of one driver process.
type client struct {
	csi.ControllerClient
	csi.NodeClient
}

func dial(t *testing.T, p *driverProc) client {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return client{csi.NewControllerClient(conn), csi.NewNodeClient(conn)}
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
}

func ok(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func isMounted(t *testing.T, path string) bool {
	for _, m := range mountsUnder(t, filepath.Dir(path)) {
		if m == path {
			return true
		}
	}
	return false
}

// TestDriverOnThisMachine goes through what csi-sanity does not: an inline ephemeral
// volume, a read-only publish, writes through a block volume's loop device, the
// injected NodePublishVolume failures, and a driver restart in the middle, all with real
// mounts, and checks that the teardown leaves nothing.
func TestDriverOnThisMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, bin := setup(t, ctx)
	dir := workDir(t)
	state := filepath.Join(dir, "state")
	pods := filepath.Join(dir, "pods")
	staging := filepath.Join(dir, "staging")
	for _, d := range []string{filepath.Join(pods, "eph"), filepath.Join(pods, "ro"), filepath.Join(pods, "blk"), staging} {
		ok(t, "mkdir", os.MkdirAll(d, 0o755))
	}
	p := startDriver(t, bin, dir, "--fail-node-publish=2")
	c := dial(t, p)

	// An inline ephemeral volume: the first two publishes fail on purpose.
	eph := &csi.NodePublishVolumeRequest{
		VolumeId: "csi-eph0", TargetPath: filepath.Join(pods, "eph", "mount"), VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		VolumeContext: map[string]string{hostpath.EphemeralContextKey: "true"},
	}
	for i := range 2 {
		if _, err := c.NodePublishVolume(ctx, eph); status.Code(err) != codes.Unavailable {
			t.Fatalf("publish %d: %v, want the injected Unavailable", i+1, err)
		}
	}
	_, err := c.NodePublishVolume(ctx, eph)
	ok(t, "publish ephemeral", err)
	ok(t, "write to the ephemeral volume", os.WriteFile(filepath.Join(eph.TargetPath, "f"), []byte("x"), 0o644))
	if _, err := os.Stat(filepath.Join(state, "csi-eph0", "f")); err != nil {
		t.Errorf("the write did not reach the volume's directory: %v", err)
	}

	// A provisioned volume published read-only.
	created, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "ro", VolumeCapabilities: []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}})
	ok(t, "create", err)
	vol := created.Volume
	_, err = c.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol.VolumeId, StagingTargetPath: staging, VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)})
	ok(t, "stage", err)
	ro := &csi.NodePublishVolumeRequest{VolumeId: vol.VolumeId, StagingTargetPath: staging, TargetPath: filepath.Join(pods, "ro", "mount"),
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), Readonly: true}
	_, err = c.NodePublishVolume(ctx, ro)
	ok(t, "publish read-only", err)
	if err := os.WriteFile(filepath.Join(ro.TargetPath, "f"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write to a read-only publication: %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(staging, "f"), []byte("x"), 0o644); err != nil {
		t.Errorf("write to the staging path (read-write): %v", err)
	}

	// A block volume: a loop device bound on a file target.
	created, err = c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "blk", VolumeCapabilities: []*csi.VolumeCapability{blockCap()},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 8 << 20}})
	ok(t, "create block", err)
	blk := created.Volume
	blkStaging := filepath.Join(dir, "blkstaging")
	ok(t, "mkdir", os.Mkdir(blkStaging, 0o755))
	_, err = c.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: blk.VolumeId, StagingTargetPath: blkStaging, VolumeCapability: blockCap()})
	ok(t, "stage block", err)
	blkTarget := filepath.Join(pods, "blk", "dev")
	_, err = c.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: blk.VolumeId, StagingTargetPath: blkStaging, TargetPath: blkTarget, VolumeCapability: blockCap()})
	ok(t, "publish block", err)
	if st, err := os.Stat(blkTarget); err != nil || st.Mode()&os.ModeDevice == 0 {
		t.Fatalf("block target: %v (mode %v), want a block device", err, st.Mode())
	}
	dev, err := os.OpenFile(blkTarget, os.O_WRONLY, 0)
	ok(t, "open block target", err)
	_, err = dev.WriteAt([]byte("hello"), 4096)
	ok(t, "write block", err)
	ok(t, "sync block", dev.Sync())
	dev.Close()

	// A restart in the middle: the new process finds everything in its state.
	p.stop()
	if !isMounted(t, eph.TargetPath) || !isMounted(t, ro.TargetPath) || !isMounted(t, blkTarget) {
		t.Fatal("stopping the driver took down its mounts")
	}
	p = startDriver(t, bin, dir)
	c = dial(t, p)

	backing, err := os.ReadFile(filepath.Join(state, blk.VolumeId))
	ok(t, "read the block volume's file", err)
	if string(backing[4096:4101]) != "hello" {
		t.Errorf("block write did not reach the backing file: %q", backing[4096:4101])
	}
	_, err = c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: eph.VolumeId, TargetPath: eph.TargetPath})
	ok(t, "unpublish ephemeral", err)
	if _, err := os.Stat(filepath.Join(state, "csi-eph0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ephemeral volume outlived its unpublish: %v", err)
	}
	if _, err := c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: eph.VolumeId, TargetPath: eph.TargetPath}); status.Code(err) != codes.NotFound {
		t.Errorf("unpublish of a gone ephemeral volume: %v, want NotFound", err)
	}
	for _, u := range []struct{ id, target, staging string }{{vol.VolumeId, ro.TargetPath, staging}, {blk.VolumeId, blkTarget, blkStaging}} {
		_, err = c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: u.id, TargetPath: u.target})
		ok(t, "unpublish", err)
		if _, err := os.Lstat(u.target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("target %s left after unpublish: %v", u.target, err)
		}
		_, err = c.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: u.id, StagingTargetPath: u.staging})
		ok(t, "unstage", err)
		_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: u.id})
		ok(t, "delete", err)
	}
	p.stop()
	checkNothingLeft(t, dir)
}
