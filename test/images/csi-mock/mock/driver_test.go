package mock

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var mountCap = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

func newDriver(t *testing.T, mutate ...func(*Config)) *Driver {
	t.Helper()
	cfg := Config{DriverName: "csi-mock-test", NodeID: "node-1"}
	for _, m := range mutate {
		m(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: code %s (%v), want %s", what, got, err, want)
	}
}

func createVolume(t *testing.T, d *Driver, name string) *csi.Volume {
	t.Helper()
	resp, err := d.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountCap},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVolume()
}

// TestCapabilities: what each service advertises follows the configuration, and nothing
// is advertised that the mock does not answer.
func TestCapabilities(t *testing.T) {
	tests := []struct {
		name               string
		mutate             func(*Config)
		plugin, ctrl, node []string
		topology           bool
		maxVolumes         int64
	}{
		{
			name:   "plain",
			mutate: func(*Config) {},
			plugin: []string{"CONTROLLER_SERVICE"},
			ctrl:   []string{"CREATE_DELETE_VOLUME", "CREATE_DELETE_SNAPSHOT", "LIST_SNAPSHOTS"},
			node:   []string{"STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS"},
		},
		{
			name: "as the CSI Mock specs run it",
			mutate: func(c *Config) {
				c.EnableAttach, c.EnableTopology, c.AttachLimit = true, true, 2
				c.ControllerExpansion, c.NodeExpansion = true, true
			},
			plugin:     []string{"CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS", "expansion ONLINE"},
			ctrl:       []string{"CREATE_DELETE_VOLUME", "CREATE_DELETE_SNAPSHOT", "LIST_SNAPSHOTS", "PUBLISH_UNPUBLISH_VOLUME", "EXPAND_VOLUME"},
			node:       []string{"STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS", "EXPAND_VOLUME"},
			topology:   true,
			maxVolumes: 2,
		},
		{
			name:   "node expansion only",
			mutate: func(c *Config) { c.NodeExpansion = true },
			plugin: []string{"CONTROLLER_SERVICE", "expansion ONLINE"},
			ctrl:   []string{"CREATE_DELETE_VOLUME", "CREATE_DELETE_SNAPSHOT", "LIST_SNAPSHOTS"},
			node:   []string{"STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS", "EXPAND_VOLUME"},
		},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t, tt.mutate)
			pc, _ := d.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
			var plugin []string
			for _, c := range pc.GetCapabilities() {
				if s := c.GetService(); s != nil {
					plugin = append(plugin, s.GetType().String())
				} else {
					plugin = append(plugin, "expansion "+c.GetVolumeExpansion().GetType().String())
				}
			}
			cc, _ := d.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
			var ctrl []string
			for _, c := range cc.GetCapabilities() {
				ctrl = append(ctrl, c.GetRpc().GetType().String())
			}
			nc, _ := d.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
			var node []string
			for _, c := range nc.GetCapabilities() {
				node = append(node, c.GetRpc().GetType().String())
			}
			if !slices.Equal(plugin, tt.plugin) || !slices.Equal(ctrl, tt.ctrl) || !slices.Equal(node, tt.node) {
				t.Errorf("plugin %q, controller %q, node %q; want %q, %q, %q", plugin, ctrl, node, tt.plugin, tt.ctrl, tt.node)
			}
			info, _ := d.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
			if info.GetNodeId() != "node-1" || info.GetMaxVolumesPerNode() != tt.maxVolumes {
				t.Errorf("NodeGetInfo = %v", info)
			}
			if got := info.GetAccessibleTopology().GetSegments()[TopologyKey]; (got == "node-1") != tt.topology {
				t.Errorf("NodeGetInfo topology %v, want topology %v", info.GetAccessibleTopology(), tt.topology)
			}
		})
	}
}

func TestCreateVolume(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, func(c *Config) { c.EnableTopology = true; c.MaxVolumeSize = 1 << 40 })
	req := &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{mountCap},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}, Parameters: map[string]string{"kind": "fast"}}
	first, err := d.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	v := first.GetVolume()
	if v.GetCapacityBytes() != 1<<30 || v.GetVolumeContext()["kind"] != "fast" || v.GetAccessibleTopology()[0].GetSegments()[TopologyKey] != "node-1" {
		t.Errorf("volume %v", v)
	}
	again, err := d.CreateVolume(ctx, req)
	if err != nil || again.GetVolume().GetVolumeId() != v.GetVolumeId() {
		t.Errorf("a repeated CreateVolume gave %v, %v; want volume %s", again, err, v.GetVolumeId())
	}
	bigger := &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: req.VolumeCapabilities, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}}
	_, err = d.CreateVolume(ctx, bigger)
	wantCode(t, "same name, more bytes", err, codes.AlreadyExists)
	huge := &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: req.VolumeCapabilities, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 40}}
	_, err = d.CreateVolume(ctx, huge)
	wantCode(t, "past the largest volume", err, codes.OutOfRange)
	block := &csi.CreateVolumeRequest{Name: "pvc-3", VolumeCapabilities: []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: mountCap.AccessMode,
	}}}
	_, err = d.CreateVolume(ctx, block)
	wantCode(t, "block", err, codes.InvalidArgument)
	none, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-4", VolumeCapabilities: req.VolumeCapabilities})
	if err != nil || none.GetVolume().GetCapacityBytes() != defaultCapacity {
		t.Errorf("no capacity range: %v, %v", none, err)
	}
}

// TestLifecycleWithAttach walks a volume through the calls a node makes for a pod, in
// order, and checks that each call out of order is refused as the hostpath plugin refuses
// it.
func TestLifecycleWithAttach(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, func(c *Config) { c.EnableAttach = true })
	v := createVolume(t, d, "pvc-1")
	staging := filepath.Join(t.TempDir(), "globalmount")
	target := filepath.Join(t.TempDir(), "pod", "mount")
	stage := &csi.NodeStageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging, VolumeCapability: mountCap}
	publish := &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap}

	_, err := d.NodeStageVolume(ctx, stage)
	wantCode(t, "stage before attach", err, codes.FailedPrecondition)
	_, err = d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "node-2", VolumeCapability: mountCap})
	wantCode(t, "attach to another node", err, codes.NotFound)
	if _, err := d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "node-1", VolumeCapability: mountCap}); err != nil {
		t.Fatal(err)
	}
	_, err = d.NodePublishVolume(ctx, publish)
	wantCode(t, "publish before stage", err, codes.FailedPrecondition)
	for range 2 { // the second time finds it done
		if _, err := d.NodeStageVolume(ctx, stage); err != nil {
			t.Fatal(err)
		}
	}
	_, err = d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging + "2", VolumeCapability: mountCap})
	wantCode(t, "stage at a second path", err, codes.FailedPrecondition)
	other := &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging + "2", TargetPath: target, VolumeCapability: mountCap}
	_, err = d.NodePublishVolume(ctx, other)
	wantCode(t, "publish from another staging path", err, codes.InvalidArgument)
	if _, err := d.NodePublishVolume(ctx, publish); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(target); err != nil || !st.IsDir() {
		t.Fatalf("target after NodePublishVolume: %v", err)
	}
	if _, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.GetVolumeId(), VolumePath: target}); err != nil {
		t.Errorf("NodeGetVolumeStats: %v", err)
	}
	_, err = d.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging})
	wantCode(t, "unstage while published", err, codes.FailedPrecondition)
	if err := os.WriteFile(filepath.Join(target, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target after NodeUnpublishVolume: %v, want it gone", err)
	}
	for range 2 {
		if _, err := d.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "node-1"}); err != nil {
		t.Fatal(err)
	}
	_, err = d.NodeStageVolume(ctx, stage)
	wantCode(t, "stage after detach", err, codes.FailedPrecondition)
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	_, err = d.NodeStageVolume(ctx, stage)
	wantCode(t, "stage a deleted volume", err, codes.NotFound)
}

// TestTeardownAfterDelete: a claim deleted while the node still has its volume staged
// (the specs race the two) leaves the node a teardown that succeeds.
func TestTeardownAfterDelete(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t)
	v := createVolume(t, d, "pvc-1")
	staging := filepath.Join(t.TempDir(), "globalmount")
	if _, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging, VolumeCapability: mountCap}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
		t.Fatalf("DeleteVolume of a staged volume: %v", err)
	}
	if _, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: "/nowhere"}); err != nil {
		t.Errorf("NodeUnpublishVolume of a deleted volume: %v", err)
	}
	if _, err := d.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging}); err != nil {
		t.Errorf("NodeUnstageVolume of a deleted volume: %v", err)
	}
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
		t.Errorf("a second DeleteVolume: %v", err)
	}
}

// TestEphemeral: an inline volume is made by NodePublishVolume, without staging, and goes
// with its target.
func TestEphemeral(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, func(c *Config) { c.EnableAttach = true })
	target := filepath.Join(t.TempDir(), "mount")
	req := &csi.NodePublishVolumeRequest{VolumeId: "csi-abc", TargetPath: target, VolumeCapability: mountCap,
		VolumeContext: map[string]string{ephemeralKey: "true", "csi.storage.k8s.io/pod.name": "p"}}
	if _, err := d.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	stats := &csi.NodeGetVolumeStatsRequest{VolumeId: "csi-abc", VolumePath: target}
	if resp, err := d.NodeGetVolumeStats(ctx, stats); err != nil || resp.GetUsage()[0].GetTotal() != ephemeralCapacity {
		t.Errorf("NodeGetVolumeStats: %v, %v", resp, err)
	}
	if _, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-abc", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	_, err := d.NodeGetVolumeStats(ctx, stats)
	wantCode(t, "stats of an unpublished ephemeral volume", err, codes.NotFound)
	_, err = d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "csi-def", TargetPath: target, VolumeCapability: mountCap})
	wantCode(t, "publish an unknown persistent volume", err, codes.NotFound)
}

func TestAttachLimit(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, func(c *Config) { c.EnableAttach, c.AttachLimit = true, 1 })
	a, b := createVolume(t, d, "pvc-a"), createVolume(t, d, "pvc-b")
	attach := func(v *csi.Volume) error {
		_, err := d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "node-1", VolumeCapability: mountCap})
		return err
	}
	if err := attach(a); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "a second volume past the limit", attach(b), codes.ResourceExhausted)
	if err := attach(a); err != nil {
		t.Errorf("attaching the attached volume again: %v", err)
	}
	if _, err := d.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: a.GetVolumeId(), NodeId: "node-1"}); err != nil {
		t.Fatal(err)
	}
	if err := attach(b); err != nil {
		t.Errorf("after a detach: %v", err)
	}
}

func TestWithoutAttach(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t)
	v := createVolume(t, d, "pvc-1")
	_, err := d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "node-1", VolumeCapability: mountCap})
	wantCode(t, "ControllerPublishVolume", err, codes.Unimplemented)
	if _, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: "/s", VolumeCapability: mountCap}); err != nil {
		t.Errorf("stage without attach: %v", err)
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("a driver without a node ID was made")
	}
	d, err := New(Config{NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := d.GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{}); resp.GetName() != DefaultDriverName {
		t.Errorf("default name %q", resp.GetName())
	}
}
