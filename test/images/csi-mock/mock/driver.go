// Package mock is the CSI driver the upstream `[sig-storage] CSI Mock` specs deploy when they
// run it in the cluster (csi-mock-driver.yaml, image hostpathplugin): the project's stand-in
// for the kubernetes-csi hostpath plugin in the role those specs give it, which is a driver
// whose every call the spec can read back afterwards.
//
// The specs learn what the node and the sidecars asked by reading the driver container's
// log: every call is written there as one line `gRPCCall: <json>` (see LogCalls). They
// check the calls' order and error codes, the volume context and secrets NodePublishVolume
// got, and that the node honours what the driver advertises (attach, the attach limit,
// topology). So the driver keeps its volumes in memory and mounts nothing: NodePublishVolume
// makes the target directory, which the node agent then gives the pod, and
// NodeUnpublishVolume removes it. The lifecycle rules are the hostpath plugin's: a volume is
// published to the node (ControllerPublishVolume) before it is staged when the driver
// advertises attach, staged before it is published, unpublished before it is unstaged; a
// call that breaks them fails, so the specs see a node that breaks them.
//
// Where it departs from the hostpath plugin: it mounts nothing (the plugin's bind mounts
// would stay in its own mount namespace, csi-mock-driver.yaml having no mount propagation,
// so the node sees the same directory either way); it advertises only what it answers (no
// clones, capacity, volume listing, volume condition or block volumes; snapshots are cut in
// memory, as the snapshot specs need them only made, listed and deleted); and
// NodeUnstageVolume or NodeUnpublishVolume of a volume it does not know succeed, where the
// plugin answers NotFound. The specs delete a claim as soon as its pod is gone, which races
// with the node's unstaging, and DeleteVolume of a volume still staged forgets it (the
// plugin only warns, as here); a node told NotFound retries its teardown for as long as it
// runs.
package mock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Defaults of the hostpath plugin's flags that the stand-in takes over.
const (
	// DefaultDriverName is the hostpath plugin's default --drivername.
	DefaultDriverName = "hostpath.csi.k8s.io"
	// TopologyKey is the hostpath plugin's topology key: a node's segment is
	// TopologyKey=<node ID>.
	TopologyKey = "topology.hostpath.csi/node"
	// DefaultMaxVolumeSize is the largest volume CreateVolume makes unless told otherwise.
	DefaultMaxVolumeSize = 1 << 40
	// VendorVersion is GetPluginInfo's vendor_version.
	VendorVersion = "nodeagent-csi-mock"
)

const (
	// defaultCapacity is a volume's size when CreateVolume names none.
	defaultCapacity = 1 << 30
	// ephemeralCapacity is the size of an inline ephemeral volume, as the hostpath plugin
	// makes them.
	ephemeralCapacity = 100 << 20
	// ephemeralKey is the volume context entry by which the node marks an inline
	// ephemeral volume.
	ephemeralKey = "csi.storage.k8s.io/ephemeral"
)

// Config is what the driver advertises and enforces.
type Config struct {
	// DriverName is the name GetPluginInfo returns. Default DefaultDriverName.
	DriverName string
	// NodeID is the node ID NodeGetInfo returns and the only node ControllerPublishVolume
	// publishes to. Required.
	NodeID string
	// EnableAttach advertises PUBLISH_UNPUBLISH_VOLUME: ControllerPublishVolume records the
	// attachment, and NodeStageVolume refuses a volume that is not attached.
	EnableAttach bool
	// AttachLimit is NodeGetInfo's max_volumes_per_node and the most volumes
	// ControllerPublishVolume keeps attached at once; 0 is no limit.
	AttachLimit int64
	// EnableTopology advertises VOLUME_ACCESSIBILITY_CONSTRAINTS: the node, and every
	// volume, is in the segment TopologyKey=NodeID.
	EnableTopology bool
	// ControllerExpansion and NodeExpansion advertise EXPAND_VOLUME in the controller and
	// node services; either advertises online volume expansion.
	ControllerExpansion, NodeExpansion bool
	// MaxVolumeSize is the largest capacity CreateVolume accepts. Default
	// DefaultMaxVolumeSize.
	MaxVolumeSize int64
}

// volume is what the driver knows of one volume.
type volume struct {
	id, name string
	capacity int64
	context  map[string]string
	// source is the snapshot the volume was restored from, nil for an empty one.
	source *csi.VolumeContentSource
	// ephemeral volumes are made by NodePublishVolume and go with their last target.
	ephemeral bool
	attached  bool
	// stagedAt is the staging path, "" when the volume is not staged.
	stagedAt string
	// published holds the target paths the volume is published at.
	published map[string]bool
}

// Driver serves the CSI identity, controller and node services of one node.
type Driver struct {
	cfg Config

	mu      sync.Mutex // held around every call
	volumes map[string]*volume
	byName  map[string]string // volume name -> ID, for CreateVolume's idempotency
	// snapshots by ID; the ID is derived from the name (snapshotID).
	snapshots map[string]*snapshot

	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
}

var (
	_ csi.IdentityServer   = (*Driver)(nil)
	_ csi.ControllerServer = (*Driver)(nil)
	_ csi.NodeServer       = (*Driver)(nil)
)

// New validates cfg and fills its defaults.
func New(cfg Config) (*Driver, error) {
	if cfg.DriverName == "" {
		cfg.DriverName = DefaultDriverName
	}
	if cfg.MaxVolumeSize == 0 {
		cfg.MaxVolumeSize = DefaultMaxVolumeSize
	}
	switch {
	case cfg.NodeID == "":
		return nil, errors.New("node ID missing")
	case cfg.AttachLimit < 0 || cfg.MaxVolumeSize < 0:
		return nil, errors.New("negative limits")
	}
	return &Driver{cfg: cfg, volumes: map[string]*volume{}, byName: map[string]string{}, snapshots: map[string]*snapshot{}}, nil
}

// Register adds the driver's three services to srv.
func (d *Driver) Register(srv *grpc.Server) {
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterControllerServer(srv, d)
	csi.RegisterNodeServer(srv, d)
}

// volumeID names the volume CreateVolume makes for name: the same name always gets the
// same ID, so a retried CreateVolume finds its volume.
func volumeID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "mock-" + hex.EncodeToString(sum[:8])
}

// segment is the node's topology segment, nil when the driver is not topology-aware.
func (d *Driver) segment() *csi.Topology {
	if !d.cfg.EnableTopology {
		return nil
	}
	return &csi.Topology{Segments: map[string]string{TopologyKey: d.cfg.NodeID}}
}

// GetPluginInfo returns the driver's name.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.DriverName, VendorVersion: VendorVersion}, nil
}

// GetPluginCapabilities advertises the controller service, topology and expansion as
// configured.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	service := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	caps := []*csi.PluginCapability{service(csi.PluginCapability_Service_CONTROLLER_SERVICE)}
	if d.cfg.EnableTopology {
		caps = append(caps, service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS))
	}
	if d.cfg.ControllerExpansion || d.cfg.NodeExpansion {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE},
		}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe says the driver is ready: it has nothing to wait for.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
