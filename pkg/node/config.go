// Package node registers the agent's Node with the apiserver and keeps it
// true: labels, addresses, capacity, conditions, images and the Lease
// heartbeat in kube-node-lease.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// Runtime is what the node controller needs from the CRI runtime.
type Runtime interface {
	Version(ctx context.Context) (*runtimeapi.VersionResponse, error)
	Status(ctx context.Context) (*runtimeapi.StatusResponse, error)
	ListImages(ctx context.Context) ([]*runtimeapi.Image, error)
	// UpdateRuntimeConfig hands the runtime the node's pod CIDR.
	UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error
}

// Pressure reports the node's resource-pressure conditions
// (*eviction.Pressure).
type Pressure interface {
	// Conditions are those of MemoryPressure, DiskPressure and
	// PIDPressure the node has now.
	Conditions() []v1.NodeConditionType
}

// Host reads the machine facts reported in the Node's status.
type Host interface {
	Read() (Machine, error)
}

var _ Host = HostReader{}

// Config configures a Controller.
type Config struct {
	// NodeName is the Node object's name (--hostname-override or the hostname).
	NodeName string
	// Hostname is the kubernetes.io/hostname label and the Hostname address;
	// empty means NodeName.
	Hostname string
	// Client talks to the apiserver as system:node:<NodeName>.
	Client kube.Interface
	// Runtime is the CRI runtime.
	Runtime Runtime
	// Host supplies the machine facts.
	Host Host
	// Clock drives every timer; nil means the real clock.
	Clock clock.WithTicker

	// NodeIPs are the --node-ip addresses; empty means DetectNodeIP.
	NodeIPs []net.IP
	// DetectNodeIP picks an address when NodeIPs is empty.
	DetectNodeIP func() (net.IP, error)
	// Labels are the --node-labels, already validated.
	Labels map[string]string
	// Taints are the registration taints (--register-with-taints).
	Taints []v1.Taint
	// ProviderID is spec.providerID.
	ProviderID string
	// ExternalCloudProvider adds the uninitialized taint (--cloud-provider=external).
	ExternalCloudProvider bool
	// ControllerAttachDetach sets the controller-managed attach-detach annotation.
	ControllerAttachDetach bool

	// MaxPods is the pods capacity.
	MaxPods int32
	// KubeReserved and SystemReserved are taken from allocatable.
	KubeReserved, SystemReserved v1.ResourceList
	// EvictionHard thresholds are taken from allocatable (memory, nodefs).
	EvictionHard map[string]Threshold
	// MaxImages caps status.images; negative means no cap.
	MaxImages int32

	// StatusUpdateFrequency is how often status is computed and, if changed, written.
	StatusUpdateFrequency time.Duration
	// StatusReportFrequency is the longest time between two status writes.
	StatusReportFrequency time.Duration
	// LeaseDurationSeconds is the Lease's duration; it is renewed every quarter of it.
	LeaseDurationSeconds int32
	// RuntimeDownAfter is how long the runtime may fail status checks before
	// Ready turns False with "container runtime is down". Zero means 30s.
	RuntimeDownAfter time.Duration
	// HealthChecks are the agent's own checks whose failure makes the node
	// not Ready, as the kubelet's PLEG check does.
	HealthChecks []HealthCheck
	// RuntimeCallTimeout bounds each runtime probe. Zero means 10s.
	RuntimeCallTimeout time.Duration
	// PodCIDRPollPeriod is how often the Node is read for a new
	// spec.podCIDR to hand the runtime. Zero means 5s.
	PodCIDRPollPeriod time.Duration
	// Watched reads this node's Node from a watch of it, as the kubelet
	// reads its own Node from an informer: the status updates, the pod
	// CIDR hand-over and admission read it there instead of asking the
	// apiserver each time. While the watch has no Node (not synced yet,
	// or the Node gone) they GET it. Optional: nil always GETs.
	Watched func() (*v1.Node, error)

	// KubeletPort is daemonEndpoints.kubeletEndpoint.Port.
	KubeletPort int32
	// VolumesInUse lists the attachable volumes mounted on the node or
	// being mounted (status.volumesInUse): the attach/detach controller
	// never detaches those. Optional.
	VolumesInUse func() []v1.UniqueVolumeName
	// KubeletVersion is nodeInfo.kubeletVersion, e.g. "v1.37.1".
	KubeletVersion string
	// Pressure sets the MemoryPressure, DiskPressure and PIDPressure
	// conditions (the eviction manager); nil reports none.
	Pressure Pressure
	// Recorder records the events of the Node's conditions turning, as
	// the kubelet's (NodeHasSufficientMemory, NodeNotReady, ...); nil
	// records none.
	Recorder Recorder
}

func (c *Config) validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if c.Client == nil || c.Runtime == nil || c.Host == nil {
		errs = append(errs, errors.New("client, runtime and host are required"))
	}
	if c.StatusUpdateFrequency <= 0 || c.StatusReportFrequency <= 0 {
		errs = append(errs, errors.New("status update and report frequencies must be > 0"))
	}
	if c.LeaseDurationSeconds <= 0 {
		errs = append(errs, errors.New("lease duration must be > 0"))
	}
	if c.MaxPods <= 0 {
		errs = append(errs, errors.New("maxPods must be > 0"))
	}
	if len(c.NodeIPs) == 0 && c.DetectNodeIP == nil {
		errs = append(errs, errors.New("either NodeIPs or DetectNodeIP is required"))
	}
	for _, t := range c.Taints {
		if err := ValidateTaint(t); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node controller config: %w", err)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Hostname == "" {
		c.Hostname = c.NodeName
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.RuntimeDownAfter <= 0 {
		c.RuntimeDownAfter = 30 * time.Second
	}
	if c.RuntimeCallTimeout <= 0 {
		c.RuntimeCallTimeout = 10 * time.Second
	}
	if c.PodCIDRPollPeriod <= 0 {
		c.PodCIDRPollPeriod = defaultPodCIDRPollPeriod
	}
}

// HealthCheck is one of the agent's checks that node readiness includes.
type HealthCheck struct {
	// Name starts the NotReady message: "<Name> is not healthy: <err>".
	Name string
	// Check returns nil when healthy.
	Check func() error
}
