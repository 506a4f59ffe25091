package hostpath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fakeMounter records bind mounts instead of making them.
type fakeMounter struct {
	mounts map[string]fakeMount // by target
	calls  []string
	err    error // returned by the next Bind
}

type fakeMount struct {
	source  string
	options []string
}

func newFakeMounter() *fakeMounter { return &fakeMounter{mounts: map[string]fakeMount{}} }

func (m *fakeMounter) Bind(source, target string, options []string) error {
	m.calls = append(m.calls, "bind "+target)
	if err := m.err; err != nil {
		m.err = nil
		return err
	}
	if _, err := os.Stat(target); err != nil {
		return err
	}
	m.mounts[target] = fakeMount{source: source, options: options}
	return nil
}

func (m *fakeMounter) Unmount(target string) error {
	if _, ok := m.mounts[target]; ok {
		m.calls = append(m.calls, "unmount "+target)
	}
	delete(m.mounts, target)
	return nil
}

func (m *fakeMounter) IsMountPoint(path string) (bool, error) {
	_, ok := m.mounts[path]
	return ok, nil
}

// fakeLoops hands out /dev/loopN for files.
type fakeLoops struct {
	bound   map[string]string // file -> device
	next    int
	resized []string // devices told their new size
}

func (l *fakeLoops) Attach(file string) (string, error) {
	dev := fmt.Sprintf("/dev/loop%d", l.next)
	l.next++
	l.bound[file] = dev
	return dev, nil
}

func (l *fakeLoops) Detach(dev string) error {
	for f, d := range l.bound {
		if d == dev {
			delete(l.bound, f)
		}
	}
	return nil
}

func (l *fakeLoops) Find(file string) (string, error) { return l.bound[file], nil }

func (l *fakeLoops) Resize(dev string) error {
	l.resized = append(l.resized, dev)
	return nil
}

// fixture is a driver on fakes, with a state dir and a node dir for staging and targets.
type fixture struct {
	d       *Driver
	m       *fakeMounter
	l       *fakeLoops
	cfg     Config
	node    string
	staging string
	target  string
}

func newFixture(t *testing.T, mutate ...func(*Config)) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{m: newFakeMounter(), l: &fakeLoops{bound: map[string]string{}}, node: filepath.Join(dir, "node")}
	f.cfg = Config{NodeID: "n1", StateDir: filepath.Join(dir, "state"), EnableAttach: true}
	for _, m := range mutate {
		m(&f.cfg)
	}
	f.staging = filepath.Join(f.node, "globalmount")
	f.target = filepath.Join(f.node, "pod", "mount")
	for _, d := range []string{f.staging, filepath.Dir(f.target)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.restart(t)
	return f
}

// restart makes a new driver on the same state dir, as after a crash.
func (f *fixture) restart(t *testing.T) {
	t.Helper()
	d, err := newDriver(f.cfg, f.m, f.l)
	if err != nil {
		t.Fatal(err)
	}
	f.d = d
}

func (f *fixture) create(t *testing.T, name string, c *csi.VolumeCapability) *csi.Volume {
	t.Helper()
	resp, err := f.d.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csi.VolumeCapability{c}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Volume
}

func (f *fixture) stage(id string, c *csi.VolumeCapability) error {
	_, err := f.d.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: f.staging, VolumeCapability: c})
	return err
}

func (f *fixture) publish(id string, c *csi.VolumeCapability, target string, readOnly bool) error {
	_, err := f.d.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: f.staging, TargetPath: target, VolumeCapability: c, Readonly: readOnly,
	})
	return err
}

func (f *fixture) unpublish(id, target string) error {
	_, err := f.d.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	return err
}

func (f *fixture) unstage(id string) error {
	_, err := f.d.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: f.staging})
	return err
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: err = %v, want code %v", what, err, code)
	}
}

func TestMountVolumeLifecycleSurvivesRestart(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := capOf(rwo, false)
	v := f.create(t, "pvc-1", c)
	if again := f.create(t, "pvc-1", c); again.VolumeId != v.VolumeId {
		t.Errorf("CreateVolume with the same name made %s, then %s", v.VolumeId, again.VolumeId)
	}
	if st, err := os.Stat(filepath.Join(f.cfg.StateDir, v.VolumeId)); err != nil || !st.IsDir() {
		t.Fatalf("volume directory: %v", err)
	}
	wantCode(t, "publish before stage", f.publish(v.VolumeId, c, f.target, false), codes.FailedPrecondition)
	if _, err := f.d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.VolumeId, NodeId: "n1", VolumeCapability: c}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := f.stage(v.VolumeId, c); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.m.mounts[f.staging].source; got != filepath.Join(f.cfg.StateDir, v.VolumeId) {
		t.Errorf("staging path bound from %q", got)
	}
	for range 2 {
		if err := f.publish(v.VolumeId, c, f.target, false); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.m.mounts[f.target].source; got != f.staging {
		t.Errorf("target bound from %q, want the staging path", got)
	}
	wantCode(t, "publish again read-only", f.publish(v.VolumeId, c, f.target, true), codes.AlreadyExists)
	wantCode(t, "unstage while published", f.unstage(v.VolumeId), codes.FailedPrecondition)
	_, err := f.d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId})
	wantCode(t, "delete while in use", err, codes.FailedPrecondition)
	if _, err := f.d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: f.target}); err != nil {
		t.Errorf("stats of the target: %v", err)
	}
	_, err = f.d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: f.node})
	wantCode(t, "stats elsewhere", err, codes.NotFound)

	f.restart(t)
	if err := f.publish(v.VolumeId, c, f.target, false); err != nil {
		t.Errorf("publish again after a restart: %v", err)
	}
	for range 2 {
		if err := f.unpublish(v.VolumeId, f.target); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(f.target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target path left: %v", err)
	}
	for range 2 {
		if err := f.unstage(v.VolumeId); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.d.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: v.VolumeId, NodeId: "n1"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := f.d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId}); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.m.mounts) != 0 {
		t.Errorf("mounts left: %v", f.m.mounts)
	}
	if _, err := os.Stat(filepath.Join(f.cfg.StateDir, v.VolumeId)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume directory left: %v", err)
	}
	wantCode(t, "unpublish of a deleted volume", f.unpublish(v.VolumeId, f.target), codes.NotFound)
}

func TestBlockVolumeUsesALoopDevice(t *testing.T) {
	f := newFixture(t)
	c := capOf(rwo, true)
	v := f.create(t, "block", c)
	file := filepath.Join(f.cfg.StateDir, v.VolumeId)
	if st, err := os.Stat(file); err != nil || st.Size() != 1<<20 {
		t.Fatalf("backing file: %v", err)
	}
	wantCode(t, "stage as mount", f.stage(v.VolumeId, capOf(rwo, false)), codes.InvalidArgument)
	if err := f.stage(v.VolumeId, c); err != nil {
		t.Fatal(err)
	}
	dev := f.l.bound[file]
	if dev == "" || len(f.m.mounts) != 0 {
		t.Fatalf("after stage: loop %q, mounts %v", dev, f.m.mounts)
	}
	if err := f.publish(v.VolumeId, c, f.target, true); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(f.target); err != nil || st.IsDir() {
		t.Errorf("block target should be a file: %v", err)
	}
	if m := f.m.mounts[f.target]; m.source != dev || !reflect.DeepEqual(m.options, []string{"ro"}) {
		t.Errorf("target mount %+v, want %s read-only", m, dev)
	}
	if err := f.unpublish(v.VolumeId, f.target); err != nil {
		t.Fatal(err)
	}
	if err := f.unstage(v.VolumeId); err != nil {
		t.Fatal(err)
	}
	if len(f.l.bound) != 0 {
		t.Errorf("loop devices left: %v", f.l.bound)
	}
}

func TestInlineEphemeralVolume(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	req := &csi.NodePublishVolumeRequest{
		VolumeId: "csi-abc123", TargetPath: f.target, VolumeCapability: capOf(rwo, false),
		VolumeContext: map[string]string{EphemeralContextKey: "true", SizeContextKey: "1Mi"},
	}
	if _, err := f.d.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(f.cfg.StateDir, "csi-abc123")
	if f.m.mounts[f.target].source != dir {
		t.Errorf("target mount %+v, want from %s", f.m.mounts[f.target], dir)
	}
	list, err := f.d.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil || len(list.Entries) != 0 {
		t.Errorf("ListVolumes shows inline ephemeral volumes: %v %v", list, err)
	}
	other := filepath.Join(filepath.Dir(f.target), "other")
	bad := proto.Clone(req).(*csi.NodePublishVolumeRequest)
	bad.TargetPath = other
	_, err = f.d.NodePublishVolume(ctx, bad)
	wantCode(t, "a second target", err, codes.FailedPrecondition)
	bad = proto.Clone(req).(*csi.NodePublishVolumeRequest)
	bad.VolumeId = "../escape"
	_, err = f.d.NodePublishVolume(ctx, bad)
	wantCode(t, "an ID that is no file name", err, codes.InvalidArgument)

	f.restart(t)
	if err := f.unpublish("csi-abc123", f.target); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ephemeral volume directory left: %v", err)
	}
	wantCode(t, "unpublish again", f.unpublish("csi-abc123", f.target), codes.NotFound)
}

func TestFailNodePublishInjectsUnavailable(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.FailNodePublish = 2 })
	c := capOf(rwo, false)
	v := f.create(t, "v", c)
	if err := f.stage(v.VolumeId, c); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		wantCode(t, fmt.Sprintf("publish %d", i+1), f.publish(v.VolumeId, c, f.target, false), codes.Unavailable)
	}
	if err := f.publish(v.VolumeId, c, f.target, false); err != nil {
		t.Errorf("third publish: %v", err)
	}
}

func TestPublishErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(t *testing.T, f *fixture, req *csi.NodePublishVolumeRequest)
		code   codes.Code
	}{
		{name: "no volume ID", mutate: func(_ *testing.T, _ *fixture, r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }, code: codes.InvalidArgument},
		{name: "no target", mutate: func(_ *testing.T, _ *fixture, r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }, code: codes.InvalidArgument},
		{name: "no capability", mutate: func(_ *testing.T, _ *fixture, r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }, code: codes.InvalidArgument},
		{name: "no staging path", mutate: func(_ *testing.T, _ *fixture, r *csi.NodePublishVolumeRequest) { r.StagingTargetPath = "" }, code: codes.InvalidArgument},
		{name: "unknown volume", mutate: func(_ *testing.T, _ *fixture, r *csi.NodePublishVolumeRequest) { r.VolumeId = "nope" }, code: codes.NotFound},
		{name: "target parent missing", mutate: func(_ *testing.T, f *fixture, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = filepath.Join(f.node, "missing", "mount")
		}, code: codes.FailedPrecondition},
		{name: "bind fails", mutate: func(_ *testing.T, f *fixture, _ *csi.NodePublishVolumeRequest) { f.m.err = errors.New("EPERM") }, code: codes.Internal},
		{name: "single writer elsewhere", mutate: func(t *testing.T, f *fixture, r *csi.NodePublishVolumeRequest) {
			other := proto.Clone(r).(*csi.NodePublishVolumeRequest)
			other.TargetPath = filepath.Join(f.node, "pod", "first")
			other.VolumeCapability = capOf(rwop, false)
			if _, err := f.d.NodePublishVolume(context.Background(), other); err != nil {
				t.Fatal(err)
			}
		}, code: codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			c := capOf(rwo, false)
			v := f.create(t, "v", c)
			if err := f.stage(v.VolumeId, c); err != nil {
				t.Fatal(err)
			}
			req := &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: f.staging, TargetPath: f.target, VolumeCapability: c}
			tc.mutate(t, f, req)
			_, err := f.d.NodePublishVolume(context.Background(), req)
			wantCode(t, "publish", err, tc.code)
			if _, ok := f.m.mounts[filepath.Clean(req.TargetPath)]; ok && err != nil {
				t.Error("a failed publish left its mount")
			}
		})
	}
}

func TestControllerPublishLimitsAndNodes(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxVolumesPerNode = 1 })
	ctx := context.Background()
	c := capOf(rwo, false)
	a, b := f.create(t, "a", c), f.create(t, "b", c)
	pub := func(id, node string) error {
		_, err := f.d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: c})
		return err
	}
	wantCode(t, "another node", pub(a.VolumeId, "n2"), codes.NotFound)
	wantCode(t, "unknown volume", pub("nope", "n1"), codes.NotFound)
	if err := pub(a.VolumeId, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := pub(a.VolumeId, "n1"); err != nil {
		t.Errorf("publish again: %v", err)
	}
	wantCode(t, "over the limit", pub(b.VolumeId, "n1"), codes.ResourceExhausted)
	_, err := f.d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "a", VolumeCapabilities: []*csi.VolumeCapability{c},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}})
	wantCode(t, "same name, larger", err, codes.AlreadyExists)
}
