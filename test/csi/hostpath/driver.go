// Package hostpath is a CSI driver whose volumes are directories and sparse files on the
// node it runs on: the project's stand-in for the kubernetes-csi hostpath plugin, for
// end-to-end tests of the agent's CSI volume plugin and for csi-sanity.
//
// One process serves the identity, controller and node services on one unix socket.
// CreateVolume makes <statedir>/<id> (a directory, or a sparse file for block access);
// NodeStageVolume bind-mounts the directory on the staging path, or attaches the file to
// a loop device; NodePublishVolume bind-mounts the staging path (or the loop device) on
// the target path, which it creates. Inline ephemeral volumes are made at
// NodePublishVolume and removed at NodeUnpublishVolume. Everything the driver knows is in
// <statedir>/state.json, so a restarted driver carries on.
//
// Requests are served one at a time under one lock: the driver is for tests, and the
// order of its effects is then the order of the calls.
package hostpath

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
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// DefaultDriverName is the CSI driver name when Config.DriverName is empty.
const DefaultDriverName = "hostpath.csi.nodeagent.dev"

// Config says what the driver serves and where it keeps its volumes.
type Config struct {
	// Endpoint is the unix socket to serve on: unix:///csi/csi.sock or a plain path.
	Endpoint string
	// DriverName is the name GetPluginInfo returns. Default DefaultDriverName.
	DriverName string
	// NodeID is the node ID NodeGetInfo returns and ControllerPublishVolume accepts.
	NodeID string
	// StateDir holds the volumes' data and state.json. It is created if missing.
	StateDir string
	// EnableAttach advertises PUBLISH_UNPUBLISH_VOLUME: ControllerPublishVolume records
	// the attachment and does nothing else.
	EnableAttach bool
	// MaxVolumesPerNode is NodeGetInfo's limit and ControllerPublishVolume's; 0 is none.
	MaxVolumesPerNode int64
	// MaxVolumeSize is the largest capacity CreateVolume accepts. Default 1 TiB.
	MaxVolumeSize int64
	// TopologyKey, when set, makes the driver topology-aware: the node's segment is
	// TopologyKey=NodeID.
	TopologyKey string
	// FailNodePublish makes the first FailNodePublish NodePublishVolume calls fail with
	// Unavailable, to show that a CO retries.
	FailNodePublish int
	// SlowNodeCalls makes NodeStageVolume and NodePublishVolume wait that long before
	// they act, whether or not the caller is still there: a window in which a CO can be
	// killed halfway through a call that then completes.
	SlowNodeCalls time.Duration
	// VendorVersion is GetPluginInfo's vendor_version. Default "dev".
	VendorVersion string
}

// mounter does the driver's bind mounts. Targets are absolute paths.
type mounter interface {
	// Bind bind-mounts source onto target, with the options "ro", "nosuid", "nodev",
	// "noexec" applied.
	Bind(source, target string, options []string) error
	// Unmount unmounts target; a path that is not mounted, or missing, is no error.
	Unmount(target string) error
	// IsMountPoint says whether a mount sits on path; a missing path is not one.
	IsMountPoint(path string) (bool, error)
}

// loopDevices attaches block volumes' backing files to loop devices.
type loopDevices interface {
	// Attach binds file to a free loop device and returns the device path.
	Attach(file string) (string, error)
	// Detach unbinds a device; an unbound or missing device is no error.
	Detach(device string) error
	// Find returns the device bound to file, "" if none.
	Find(file string) (string, error)
	// Resize makes a device take in the new size of its backing file.
	Resize(device string) error
}

// Driver serves the CSI identity, controller and node services.
type Driver struct {
	cfg    Config
	mount  mounter
	loops  loopDevices
	mu     sync.Mutex // held around every request
	state  *state
	failed int // NodePublishVolume calls failed on purpose so far

	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
}

var (
	_ csi.IdentityServer   = (*Driver)(nil)
	_ csi.ControllerServer = (*Driver)(nil)
	_ csi.NodeServer       = (*Driver)(nil)
)

// New validates cfg, fills its defaults and loads the state under cfg.StateDir.
func New(cfg Config) (*Driver, error) {
	return newDriver(cfg, sysMounter{}, newSysLoops())
}

func newDriver(cfg Config, m mounter, l loopDevices) (*Driver, error) {
	if cfg.DriverName == "" {
		cfg.DriverName = DefaultDriverName
	}
	if cfg.VendorVersion == "" {
		cfg.VendorVersion = "dev"
	}
	if cfg.MaxVolumeSize == 0 {
		cfg.MaxVolumeSize = 1 << 40
	}
	switch {
	case cfg.NodeID == "":
		return nil, errors.New("node ID missing")
	case cfg.StateDir == "":
		return nil, errors.New("state dir missing")
	case !filepath.IsAbs(cfg.StateDir):
		return nil, fmt.Errorf("state dir %q: not an absolute path", cfg.StateDir)
	case cfg.MaxVolumesPerNode < 0 || cfg.MaxVolumeSize < 0 || cfg.FailNodePublish < 0:
		return nil, errors.New("negative limits")
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return nil, err
	}
	st, err := loadState(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	return &Driver{cfg: cfg, mount: m, loops: l, state: st}, nil
}

// Run serves on the endpoint until ctx ends, then stops the server and removes the socket.
// A socket left behind by an earlier run is replaced.
func (d *Driver) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	lis, path, err := endpoint.Listen(d.cfg.Endpoint)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls(logger)))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterControllerServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	logger.Info("Serving CSI", "driver", d.cfg.DriverName, "node", d.cfg.NodeID, "socket", path, "stateDir", d.cfg.StateDir)
	return endpoint.Serve(ctx, srv, lis)
}

// logCalls puts the logger into each request's context and logs every call's outcome:
// failures always, successes at V(2).
func logCalls(logger klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		l := logger.WithValues("method", info.FullMethod)
		if v, ok := req.(interface{ GetVolumeId() string }); ok && v.GetVolumeId() != "" {
			l = l.WithValues("volumeID", v.GetVolumeId())
		}
		start := time.Now()
		resp, err := handler(klog.NewContext(ctx, l), req)
		if err != nil {
			l.Info("CSI call failed", "code", status.Code(err), "err", err, "duration", time.Since(start))
		} else {
			l.V(2).Info("CSI call", "duration", time.Since(start))
		}
		return resp, err
	}
}

// volumePath is where a volume's data lives.
func (d *Driver) volumePath(id string) string { return filepath.Join(d.cfg.StateDir, id) }

// segment is the node's topology segment, nil when the driver is not topology-aware.
func (d *Driver) segment() map[string]string {
	if d.cfg.TopologyKey == "" {
		return nil
	}
	return map[string]string{d.cfg.TopologyKey: d.cfg.NodeID}
}
