// Package mountpod is a CSI driver whose node plugin serves each volume through a
// "mount pod": the shape of JuiceFS's CSI driver, where NodePublishVolume asks the
// apiserver for a pod on its own node that runs the file system's client (FUSE there, a
// tmpfs here), waits until that pod is Ready, and bind-mounts what it serves onto the
// target path. A node agent running this driver must keep running other pods, the mount
// pod first, while the publishing pod waits.
//
// The volume handle is taken as given (static PersistentVolumes; there is no controller
// service). A volume's file system lives as long as its mount pod: the pod is made at the
// first publish on the node and deleted when its last user unpublishes. Users are
// annotations on the mount pod, one per target path, so a restarted driver knows them.
//
// Calls of one volume are served one at a time; different volumes proceed together.
package mountpod

import (
	"context"
	"errors"
	"fmt"
	"github.com/nodeagent/nodeagent/test/csi/endpoint"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// DefaultDriverName is the CSI driver name when Config.DriverName is empty.
const DefaultDriverName = "mountpod.csi.nodeagent.dev"

// Config says what the driver serves and how it makes its mount pods.
type Config struct {
	// Endpoint is the unix socket to serve on: unix:///csi/csi.sock or a plain path.
	Endpoint string
	// DriverName is the name GetPluginInfo returns. Default DefaultDriverName.
	DriverName string
	// NodeID is the node's name: NodeGetInfo's node ID and the mount pods' spec.nodeName.
	// Required.
	NodeID string
	// StateDir holds one directory per volume, which its mount pod mounts from the host.
	// The driver must see it at the host's path, below a shared mount, with mounts
	// propagating both ways. Required.
	StateDir string
	// Namespace is where mount pods are made. Required.
	Namespace string
	// Image is the mount pods' image; it needs sh, sleep, mkdir, grep, mount and umount
	// (busybox). Required.
	Image string
	// Client talks to the apiserver. Required.
	Client kubernetes.Interface
	// MountPodDelay is how long a mount pod waits before it mounts its file system, and
	// so before it is Ready: a slow start on purpose.
	MountPodDelay time.Duration
	// ReadyTimeout bounds NodePublishVolume's wait for the mount pod to be Ready; past it
	// the call fails with Unavailable for the CO to retry. Default 90s, below the 2
	// minutes the kubelet gives a CSI call.
	ReadyTimeout time.Duration
	// GoneTimeout bounds NodeUnpublishVolume's wait for a deleted mount pod to be gone.
	// Default 60s.
	GoneTimeout time.Duration
	// PollInterval is how often the driver looks at a mount pod it waits for. Default
	// 500ms.
	PollInterval time.Duration
	// VendorVersion is GetPluginInfo's vendor_version. Default "dev".
	VendorVersion string
}

// mounter does the driver's bind mounts.
type mounter interface {
	// Bind bind-mounts source onto target, read-only if asked.
	Bind(source, target string, readOnly bool) error
	// Unmount unmounts every mount on target; a path that is not mounted, or missing,
	// is no error.
	Unmount(target string) error
	// IsMountPoint says whether a mount sits on path; a missing path is not one.
	IsMountPoint(path string) (bool, error)
}

// Driver serves the CSI identity and node services.
type Driver struct {
	cfg   Config
	mount mounter

	mu      sync.Mutex
	volumes map[string]*volumeLock // by handle

	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
}

// volumeLock serialises the calls of one volume; users counts the calls holding or
// waiting for it, and the last one out drops it.
type volumeLock struct {
	sync.Mutex
	users int
}

var (
	_ csi.IdentityServer = (*Driver)(nil)
	_ csi.NodeServer     = (*Driver)(nil)
)

// New validates cfg, fills its defaults and makes the state dir.
func New(cfg Config) (*Driver, error) {
	return newDriver(cfg, sysMounter{})
}

func newDriver(cfg Config, m mounter) (*Driver, error) {
	if cfg.DriverName == "" {
		cfg.DriverName = DefaultDriverName
	}
	if cfg.VendorVersion == "" {
		cfg.VendorVersion = "dev"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 90 * time.Second
	}
	if cfg.GoneTimeout == 0 {
		cfg.GoneTimeout = 60 * time.Second
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	switch {
	case cfg.NodeID == "":
		return nil, errors.New("node ID missing")
	case cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir):
		return nil, fmt.Errorf("state dir %q: not an absolute path", cfg.StateDir)
	case cfg.Namespace == "":
		return nil, errors.New("mount pod namespace missing")
	case cfg.Image == "":
		return nil, errors.New("mount pod image missing")
	case cfg.Client == nil:
		return nil, errors.New("apiserver client missing")
	case cfg.MountPodDelay < 0 || cfg.ReadyTimeout < 0 || cfg.GoneTimeout < 0 || cfg.PollInterval < 0:
		return nil, errors.New("negative durations")
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return nil, err
	}
	return &Driver{cfg: cfg, mount: m, volumes: map[string]*volumeLock{}}, nil
}

// lockVolume waits for the volume's other calls and returns the unlock.
func (d *Driver) lockVolume(handle string) func() {
	d.mu.Lock()
	l := d.volumes[handle]
	if l == nil {
		l = &volumeLock{}
		d.volumes[handle] = l
	}
	l.users++
	d.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		d.mu.Lock()
		if l.users--; l.users == 0 {
			delete(d.volumes, handle)
		}
		d.mu.Unlock()
	}
}

// Run serves on the endpoint until ctx ends, then stops the server and removes the socket.
// A socket left behind by an earlier run is replaced. Calls under way when ctx ends get
// five seconds to finish.
func (d *Driver) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	lis, path, err := endpoint.Listen(d.cfg.Endpoint)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(klog.NewContext(ctx, logger.WithValues("method", info.FullMethod)), req)
	}))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	logger.Info("Serving CSI", "driver", d.cfg.DriverName, "node", d.cfg.NodeID, "socket", path,
		"stateDir", d.cfg.StateDir, "namespace", d.cfg.Namespace, "mountPodDelay", d.cfg.MountPodDelay)
	return endpoint.Serve(ctx, srv, lis)
}

// GetPluginInfo returns the driver's name and version.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.DriverName, VendorVersion: d.cfg.VendorVersion}, nil
}

// GetPluginCapabilities advertises nothing: no controller service, no topology.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

// Probe says the driver is ready once it serves.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
