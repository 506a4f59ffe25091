// Package csi talks to the node side of CSI drivers: it registers the
// drivers that announce themselves in the plugin registration directory,
// publishes what they report about this node (the Node's nodeid annotation
// and topology labels, the CSINode object), and makes the node calls
// (NodeStage, NodePublish and their undoing) that the volume manager's CSI
// plugin needs.
package csi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

// CallTimeout bounds every CSI call, as the kubelet's csiTimeout does: a
// driver that hangs fails the pass, which is retried with back-off.
const CallTimeout = 2 * time.Minute

// Driver is one registered CSI driver as the node sees it.
type Driver struct {
	Name     string
	Endpoint string
	// NodeID, MaxVolumes and Topology are the driver's NodeGetInfo answer.
	NodeID     string
	MaxVolumes int64
	Topology   map[string]string
	// StageUnstage is the STAGE_UNSTAGE_VOLUME node capability: volumes
	// are staged in a global directory before they are published.
	StageUnstage bool
	// VolumeStats is the GET_VOLUME_STATS node capability.
	VolumeStats bool
	// VolumeMountGroup is the VOLUME_MOUNT_GROUP node capability: the
	// driver applies the pod's fsGroup itself, given as volume_mount_group
	// at stage and publish, and the node changes no ownership.
	VolumeMountGroup bool
	// NodeExpand is the EXPAND_VOLUME node capability: the driver grows a
	// published volume on the node (NodeExpandVolume) after its controller
	// grew it.
	NodeExpand bool

	conn *grpc.ClientConn
	node csipb.NodeClient
}

// Node is the driver's node service.
func (d *Driver) Node() csipb.NodeClient { return d.node }

func (d *Driver) close() {
	if d.conn != nil {
		_ = d.conn.Close()
	}
}

// dialDriver connects to a driver's socket and asks for its node facts.
func dialDriver(ctx context.Context, name, endpoint string) (*Driver, error) {
	conn, err := newClient(strings.TrimPrefix(endpoint, "unix://"))
	if err != nil {
		return nil, fmt.Errorf("connect to CSI driver %s at %s: %w", name, endpoint, err)
	}
	d := &Driver{Name: name, Endpoint: endpoint, conn: conn, node: csipb.NewNodeClient(conn)}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	info, err := d.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		d.close()
		return nil, fmt.Errorf("CSI driver %s: NodeGetInfo: %w", name, err)
	}
	if info.GetNodeId() == "" {
		d.close()
		return nil, fmt.Errorf("CSI driver %s: NodeGetInfo returned an empty node ID", name)
	}
	d.NodeID, d.MaxVolumes = info.GetNodeId(), info.GetMaxVolumesPerNode()
	d.Topology = info.GetAccessibleTopology().GetSegments()
	caps, err := d.node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		d.close()
		return nil, fmt.Errorf("CSI driver %s: NodeGetCapabilities: %w", name, err)
	}
	for _, c := range caps.GetCapabilities() {
		switch c.GetRpc().GetType() {
		case csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
			d.StageUnstage = true
		case csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS:
			d.VolumeStats = true
		case csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP:
			d.VolumeMountGroup = true
		case csipb.NodeServiceCapability_RPC_EXPAND_VOLUME:
			d.NodeExpand = true
		}
	}
	return d, nil
}

// NodeInfo publishes what drivers report about this node: the Node's
// annotation and labels and the CSINode object.
type NodeInfo interface {
	AddDriver(ctx context.Context, d *Driver) error
	RemoveDriver(ctx context.Context, name string) error
}

// Registry holds the registered drivers by name.
type Registry struct {
	info NodeInfo

	mu      sync.Mutex
	drivers map[string]*Driver
}

// NewRegistry returns an empty registry that publishes through info.
func NewRegistry(info NodeInfo) *Registry {
	return &Registry{info: info, drivers: map[string]*Driver{}}
}

// ErrNotRegistered is the error of a volume whose driver is not (yet)
// registered on this node.
var ErrNotRegistered = errors.New("not found in the list of registered CSI drivers")

// Driver returns the registered driver of that name, or an error in the
// kubelet's words.
func (r *Registry) Driver(name string) (*Driver, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.drivers[name]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("driver name %s %w", name, ErrNotRegistered)
}

// Register validates a driver that announced itself, connects to it,
// publishes its node facts and makes it available to volumes. A driver
// registered again (it restarted) replaces the old connection.
func (r *Registry) Register(ctx context.Context, name, endpoint string, versions []string) error {
	if name == "" {
		return errors.New("CSI driver registration: empty driver name")
	}
	if endpoint == "" {
		return fmt.Errorf("CSI driver %s: empty endpoint", name)
	}
	if !supportsV1(versions) {
		return fmt.Errorf("CSI driver %s: none of the versions %v is supported (want 1.x)", name, versions)
	}
	d, err := dialDriver(ctx, name, endpoint)
	if err != nil {
		return err
	}
	if err := r.info.AddDriver(ctx, d); err != nil {
		d.close()
		return fmt.Errorf("CSI driver %s: publish node info: %w", name, err)
	}
	r.mu.Lock()
	old := r.drivers[name]
	r.drivers[name] = d
	r.mu.Unlock()
	if old != nil {
		old.close()
	}
	klog.FromContext(ctx).Info("Registered CSI driver", "driver", name, "endpoint", endpoint, "nodeID", d.NodeID,
		"stageUnstage", d.StageUnstage)
	return nil
}

// Deregister forgets a driver whose registration socket went away and
// removes it from the node's published facts. Only the registration made
// at endpoint is removed: a driver that re-registered elsewhere stays.
func (r *Registry) Deregister(ctx context.Context, name, endpoint string) error {
	r.mu.Lock()
	d, ok := r.drivers[name]
	if ok && (endpoint == "" || d.Endpoint == endpoint) {
		delete(r.drivers, name)
	} else {
		ok = false
	}
	r.mu.Unlock()
	if !ok {
		return nil
	}
	d.close()
	klog.FromContext(ctx).Info("Deregistered CSI driver", "driver", name)
	return r.info.RemoveDriver(ctx, name)
}

// supportsV1 says whether a driver's supported versions include a 1.x.
func supportsV1(versions []string) bool {
	for _, v := range versions {
		v = strings.TrimPrefix(v, "v")
		if v == "1" || strings.HasPrefix(v, "1.") {
			return true
		}
	}
	return false
}
