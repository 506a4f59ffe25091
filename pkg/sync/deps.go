package sync

import (
	"context"
	goruntime "runtime"
	"time"

	v1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/admission"
	"github.com/nodeagent/nodeagent/pkg/allocation"
	"github.com/nodeagent/nodeagent/pkg/qos"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/volume"
)

// Runtime is what workers do to the container runtime.
type Runtime interface {
	RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error)
	StopPodSandbox(ctx context.Context, podSandboxID string) error
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
	PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error)
	CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
	StartContainer(ctx context.Context, containerID string) error
	StopContainer(ctx context.Context, containerID string, timeout int64) error
	RemoveContainer(ctx context.Context, containerID string) error
	// UpdateContainerResources applies an in-place resize.
	UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error
}

// Images is how workers find and pull images.
type Images interface {
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
	PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
}

// PodCache is the observed runtime state, kept by the PLEG.
type PodCache interface {
	GetNewerThan(ctx context.Context, uid types.UID, t time.Time) (*runtime.PodStatus, error)
}

// Relister is asked for a prompt relist of a pod after its worker has acted.
type Relister interface {
	RelistPod(uid types.UID)
}

// StatusWriter takes pod statuses to write to the apiserver.
type StatusWriter interface {
	Set(pod *v1.Pod, st v1.PodStatus)
	SetFinal(pod *v1.Pod, st v1.PodStatus)
	// Forget drops what is left to write of a pod: a static pod whose
	// file is gone has no object (its mirror pod goes) to write it to.
	Forget(uid types.UID)
}

// Recorder records Kubernetes events (client-go's record.EventRecorder).
type Recorder interface {
	Eventf(object kruntime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// SecretGetter reads image pull secrets.
type SecretGetter interface {
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// Volumes sets up and tears down pods' volumes (pkg/volume's Manager).
type Volumes interface {
	// MountPod sets up every volume of the pod; idempotent, and it
	// refreshes API-backed contents. An error names each failed volume.
	MountPod(ctx context.Context, pod *v1.Pod) (volume.Mounts, error)
	// PrepareSubPath binds a volumeMount's subPath safely and returns the
	// path the container binds.
	PrepareSubPath(ctx context.Context, req volume.SubPathRequest) (string, error)
	// UnmountPod tears down every volume and removes the pod directory.
	UnmountPod(ctx context.Context, uid types.UID) error
	// NextRefresh is when the pod's volumes next need a sync (tokens).
	NextRefresh(uid types.UID) (time.Time, bool)
}

// PodCgroups makes and removes the pods' cgroups (pkg/cgroups).
type PodCgroups interface {
	// EnsurePod makes the pod's cgroup and returns its path, the cgroup
	// parent of the pod's sandbox.
	EnsurePod(ctx context.Context, pod *v1.Pod) (string, error)
	// PodReady is the pod's cgroup path and whether EnsurePod would do
	// nothing (the cgroup is there as asked).
	PodReady(pod *v1.Pod) (string, bool)
	// SettlePod lowers the pod's cgroup to what the pod asks for once its
	// containers were resized: EnsurePod only raises an existing one.
	SettlePod(ctx context.Context, pod *v1.Pod) error
	// RemovePod removes the pod's cgroup once nothing of the pod runs.
	RemovePod(ctx context.Context, uid types.UID) error
}

// Admitter decides whether a pod may run on the node (pkg/admission).
type Admitter interface {
	Admit(logger klog.Logger, pod *v1.Pod, node *v1.Node, admitted []*v1.Pod) admission.Result
}

// NodeGetter returns the node as pods are admitted against: labels,
// taints and allocatable.
type NodeGetter func(ctx context.Context) (*v1.Node, error)

// deps are the components a worker acts through, handed to every worker
// by the Dispatcher; all are set (NewDispatcher fills the optional ones
// with no-ops), except cgroups, env and allocatable.
type deps struct {
	runtime     Runtime
	images      Images
	cache       PodCache
	relister    Relister
	status      StatusWriter
	events      Recorder
	secrets     SecretGetter
	volumes     Volumes
	env         runtime.EnvSource
	allocatable func() v1.ResourceList
	cgroups     PodCgroups
	probes      Prober
	hooks       HookRunner
	clock       clock.WithTicker
	metrics     Metrics
	timeline    Timeline
	tracer      Tracer
	pulls       *slots
	// sandboxes bound the RunPodSandbox calls in flight (Config.MaxParallelSandboxes).
	sandboxes *slots
	// pullRecords judge pods' use of present images and record pulls.
	pullRecords PullRecords
	// runtimeClasses resolve pods' runtimeClassName to a handler.
	runtimeClasses RuntimeClasses
	// userns gives hostUsers: false pods their user namespaces.
	userns UserNamespaces
	// alloc and resizes are the pods' allocated and applied resources
	// and their resize conditions.
	alloc   *allocation.Store
	resizes *resizeConditions
}

// settings are the node's settings every worker reads; see Config.
type settings struct {
	podOptions                               runtime.PodOptions
	resources                                qos.NodeOptions
	runtimeHandler, rootDir                  string
	nodeIPs                                  []string
	runtimeName, hostsFile                   string
	resync, volumeRefresh, maxRestartBackoff time.Duration
	resyncJitter                             float64
	createStartDelay                         time.Duration
}

// sandboxesPerCPU is the default bound on RunPodSandbox calls in flight, per CPU.
// Each call starts a shim, the sandbox's runc and the CNI plugins, all of which
// compete for the same cores (and the CNI's iptables lock); asked for all at once,
// they contend: with 250 pods on 2 cores, all running took 55 s with every sandbox
// asked for at once, 42 s with 6 in flight, 41 s with 12 and 47 s with 24 (the shims'
// own CPU 27.7 s, 9.7, 10 and 15.2: each shim that exists is read by the runtime's
// stats collector every second, so shims started early cost while the rest start).
// On a faster machine (2026-11-29, the floor starting 100 pods in 20 s), two rounds each:
// 100 pods all started in 20.0 and 20.0 s with 8 in flight, 22.7–23.9 with 16, 19.4 and
// 23.9 with no bound; 250 in 70.5 and 66.0 s with 8, 72.9 with 16, 78.5 and 63.9 with none
// (BENCHMARKS.md).
const sandboxesPerCPU = 4

// maxParallelSandboxes is the bound Config.MaxParallelSandboxes asks for.
func maxParallelSandboxes(n int) int {
	switch {
	case n < 0:
		return 0
	case n == 0:
		return sandboxesPerCPU * goruntime.NumCPU()
	}
	return n
}

// slots bound how many calls of one kind (image pulls, sandbox creations) run at once
// across all pods.
type slots struct {
	tokens chan struct{} // one per running call; nil: no limit
}

func newSlots(n int) *slots {
	if n <= 0 {
		return &slots{}
	}
	return &slots{tokens: make(chan struct{}, n)}
}

// slot waits for a turn and returns its release.
func (s *slots) slot(ctx context.Context) (func(), error) {
	if s == nil || s.tokens == nil {
		return func() {}, nil
	}
	select {
	case s.tokens <- struct{}{}:
		return func() { <-s.tokens }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
