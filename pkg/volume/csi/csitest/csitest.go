// Package csitest has in-process fakes of a CSI driver's node service and
// of its registration socket, served over real gRPC on unix sockets, for
// the unit tests of the agent's CSI code.
package csitest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Driver is a fake CSI driver: it records the node calls it gets and can
// be told to fail publishes.
type Driver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer

	Name     string
	NodeID   string
	Stage    bool              // advertise STAGE_UNSTAGE_VOLUME
	Stats    bool              // advertise GET_VOLUME_STATS; usage is 1000 bytes of 4096, 3 inodes of 64
	Group    bool              // advertise VOLUME_MOUNT_GROUP
	Expand   bool              // advertise EXPAND_VOLUME
	Topology map[string]string // NodeGetInfo's accessible topology
	// FailPublish makes that many NodePublishVolume calls fail first.
	FailPublish int
	// OnPublish runs at each successful publish (e.g. to "mount" the
	// target in a fake mount table); OnUnpublish at each unpublish.
	OnPublish   func(req *csipb.NodePublishVolumeRequest)
	OnUnpublish func(req *csipb.NodeUnpublishVolumeRequest)
	// UnpublishErr, when set, is what NodeUnpublishVolume answers;
	// StageErr and UnstageErr likewise for NodeStageVolume and
	// NodeUnstageVolume.
	UnpublishErr, StageErr, UnstageErr error
	// ExpandErrs are the answers of the next NodeExpandVolume calls, one
	// each, before they succeed.
	ExpandErrs []error

	mu    sync.Mutex
	calls []string
	last  map[string]any
}

// Calls lists "Method volumeID" for every node call so far.
func (d *Driver) Calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.calls...)
}

// Last returns the last request of a method.
func (d *Driver) Last(method string) any {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last[method]
}

func (d *Driver) record(method, volumeID string, req any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, method+" "+volumeID)
	if d.last == nil {
		d.last = map[string]any{}
	}
	d.last[method] = req
}

func (d *Driver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: d.Name, VendorVersion: "test"}, nil
}

func (d *Driver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	resp := &csipb.NodeGetInfoResponse{NodeId: d.NodeID, MaxVolumesPerNode: 7}
	if len(d.Topology) > 0 {
		resp.AccessibleTopology = &csipb.Topology{Segments: d.Topology}
	}
	return resp, nil
}

func (d *Driver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	resp := &csipb.NodeGetCapabilitiesResponse{}
	if d.Stage {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}})
	}
	if d.Stats {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS}}})
	}
	if d.Expand {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_EXPAND_VOLUME}}})
	}
	if d.Group {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP}}})
	}
	return resp, nil
}

func (d *Driver) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	d.record("NodeGetVolumeStats", req.GetVolumeId(), req)
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: 4096, Available: 3096, Used: 1000},
		{Unit: csipb.VolumeUsage_INODES, Total: 64, Available: 61, Used: 3},
	}}, nil
}

func (d *Driver) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	d.record("NodeExpandVolume", req.GetVolumeId(), req)
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ExpandErrs) > 0 {
		err := d.ExpandErrs[0]
		d.ExpandErrs = d.ExpandErrs[1:]
		return nil, err
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
}

func (d *Driver) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	d.record("NodeStageVolume", req.GetVolumeId(), req)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.StageErr != nil {
		return nil, d.StageErr
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (d *Driver) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	d.record("NodeUnstageVolume", req.GetVolumeId(), req)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.UnstageErr != nil {
		return nil, d.UnstageErr
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (d *Driver) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	d.record("NodePublishVolume", req.GetVolumeId(), req)
	d.mu.Lock()
	fail := d.FailPublish > 0
	if fail {
		d.FailPublish--
	}
	d.mu.Unlock()
	if fail {
		return nil, status.Error(codes.Unavailable, "injected publish failure")
	}
	if err := os.MkdirAll(req.GetTargetPath(), 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if d.OnPublish != nil {
		d.OnPublish(req)
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	d.record("NodeUnpublishVolume", req.GetVolumeId(), req)
	d.mu.Lock()
	uerr := d.UnpublishErr
	d.mu.Unlock()
	if uerr != nil {
		return nil, uerr
	}
	if d.OnUnpublish != nil {
		d.OnUnpublish(req)
	}
	if err := os.RemoveAll(req.GetTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// Serve serves d on a unix socket at path until the test ends; it returns
// a function that stops it early.
func Serve(t testing.TB, path string, d *Driver) (stop func()) {
	t.Helper()
	s := grpc.NewServer()
	csipb.RegisterIdentityServer(s, d)
	csipb.RegisterNodeServer(s, d)
	return serve(t, path, s)
}

// Registrar is a fake node-driver-registrar: it answers GetInfo and
// passes on the registration status it is told.
type Registrar struct {
	registerapi.UnimplementedRegistrationServer
	Info   registerapi.PluginInfo
	Status chan *registerapi.RegistrationStatus
}

func (r *Registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	info := &registerapi.PluginInfo{Type: r.Info.Type, Name: r.Info.Name, Endpoint: r.Info.Endpoint,
		SupportedVersions: r.Info.SupportedVersions}
	return info, nil
}

func (r *Registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.Status <- s
	return &registerapi.RegistrationStatusResponse{}, nil
}

// ServeRegistrar serves r on a unix socket at path until the test ends or
// stop is called; stop removes the socket, as a registrar that exits does.
func ServeRegistrar(t testing.TB, path string, r *Registrar) (stop func()) {
	t.Helper()
	s := grpc.NewServer()
	registerapi.RegisterRegistrationServer(s, r)
	return serve(t, path, s)
}

func serve(t testing.TB, path string, s *grpc.Server) func() {
	t.Helper()
	_ = os.Remove(path)
	l, err := listenUnix(path)
	if err != nil {
		t.Fatalf("listen %s: %v", path, err)
	}
	go func() { _ = s.Serve(l) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.Stop()
			_ = os.Remove(path)
		})
	}
	t.Cleanup(stop)
	return stop
}

// listenUnix listens on a unix socket at path. A path longer than a socket address holds
// is bound through its directory, opened, as /proc/self/fd/<n>/<name>, as a driver
// container binds a short path that the node sees at a long one.
func listenUnix(path string) (net.Listener, error) {
	if len(path) < 108 {
		return net.Listen("unix", path)
	}
	dir, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	l, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(path)))
	if err != nil {
		return nil, err
	}
	// The name it was bound by stops meaning the socket once dir is closed: the
	// caller removes path itself.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	return l, nil
}
