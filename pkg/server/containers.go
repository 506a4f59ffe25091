package server

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's well-known keys, which the agent puts on every sandbox and
// container it creates (see pkg/runtime/labels.go).
const (
	labelPodName           = "io.kubernetes.pod.name"
	labelPodNamespace      = "io.kubernetes.pod.namespace"
	labelPodUID            = "io.kubernetes.pod.uid"
	labelContainerName     = "io.kubernetes.container.name"
	annotationRestartCount = "io.kubernetes.container.restartCount"
)

// RuntimeReader is the part of the CRI runtime service that finds pods and
// containers.
type RuntimeReader interface {
	ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
}

// RuntimeStreamer is the part of the CRI runtime service that runs commands
// in containers and opens streams to them.
type RuntimeStreamer interface {
	ExecSync(ctx context.Context, in *runtimeapi.ExecSyncRequest, opts ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error)
	Exec(ctx context.Context, in *runtimeapi.ExecRequest, opts ...grpc.CallOption) (*runtimeapi.ExecResponse, error)
	Attach(ctx context.Context, in *runtimeapi.AttachRequest, opts ...grpc.CallOption) (*runtimeapi.AttachResponse, error)
	PortForward(ctx context.Context, in *runtimeapi.PortForwardRequest, opts ...grpc.CallOption) (*runtimeapi.PortForwardResponse, error)
}

// RuntimeService is all the node API needs from the runtime.
type RuntimeService interface {
	RuntimeReader
	RuntimeStreamer
}

var _ RuntimeService = runtimeapi.RuntimeServiceClient(nil)

// api holds what the endpoints need; one per Server.
type api struct {
	nodeName    string
	pods        PodLister
	timeline    http.Handler
	runtime     RuntimeService
	callTimeout time.Duration
	idleTimeout time.Duration

	stats        SummaryProvider
	cgroups      CgroupStatsProvider
	metrics      http.Handler
	probeMetrics http.Handler
	configz      any
	debugging    bool
	profilingOn  bool
	// nodeLogs serves /logs/; nil when enableSystemLogHandler is off.
	nodeLogs *nodeLogs
	// streams and follows cap each user's exec/attach/port-forward
	// streams and followed logs.
	streams *concurrencyLimit
	follows *concurrencyLimit
}

// podRef is the pod a request names: /<op>/{namespace}/{pod}[/{uid}]/...
type podRef struct {
	namespace, name string
	uid             types.UID
}

// podRefFrom reads and checks the path parameters, so that nothing odd
// reaches a label selector or a message.
func podRefFrom(r *http.Request) (podRef, error) {
	ref := podRef{namespace: r.PathValue("namespace"), name: r.PathValue("pod"), uid: types.UID(r.PathValue("uid"))}
	if errs := validation.IsDNS1123Label(ref.namespace); len(errs) > 0 {
		return ref, errorf(http.StatusBadRequest, "invalid namespace %q: %s", ref.namespace, errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(ref.name); len(errs) > 0 {
		return ref, errorf(http.StatusBadRequest, "invalid pod name %q: %s", ref.name, errs[0])
	}
	if len(ref.uid) > 128 || (ref.uid != "" && len(validation.IsValidLabelValue(string(ref.uid))) > 0) {
		return ref, errorf(http.StatusBadRequest, "invalid pod uid %q", ref.uid)
	}
	return ref, nil
}

func containerNameFrom(r *http.Request) (string, error) {
	name := r.PathValue("container")
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return "", errorf(http.StatusBadRequest, "invalid container name %q: %s", name, errs[0])
	}
	return name, nil
}

// findPod returns the pod the agent runs under ref, or a 404.
func (a *api) findPod(ref podRef) (*v1.Pod, error) {
	for _, p := range a.pods() {
		if p.Namespace == ref.namespace && p.Name == ref.name {
			if ref.uid != "" && p.UID != ref.uid {
				break
			}
			return p, nil
		}
	}
	if ref.uid != "" {
		return nil, errorf(http.StatusNotFound, "pod %s/%s with UID %s not found on node %s", ref.namespace, ref.name, ref.uid, a.nodeName)
	}
	return nil, errorf(http.StatusNotFound, "pod %s/%s not found on node %s", ref.namespace, ref.name, a.nodeName)
}

// checkContainerInSpec gives a 404 for a container the pod does not have.
func checkContainerInSpec(pod *v1.Pod, name string) error {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return nil
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return nil
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return nil
		}
	}
	return errorf(http.StatusNotFound, "container %q not found in pod %s/%s", name, pod.Namespace, pod.Name)
}

// containerAttempts lists the runtime's containers for one container of a
// pod, newest attempt first.
func (a *api) containerAttempts(ctx context.Context, pod *v1.Pod, name string) ([]*runtimeapi.Container, error) {
	ctx, cancel := context.WithTimeout(ctx, a.callTimeout)
	defer cancel()
	resp, err := a.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{
			labelPodNamespace:  pod.Namespace,
			labelPodName:       pod.Name,
			labelPodUID:        string(pod.UID),
			labelContainerName: name,
		},
	}})
	if err != nil {
		return nil, errorf(http.StatusInternalServerError, "list containers of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	cs := resp.GetContainers()
	sortNewestFirst(cs)
	return cs, nil
}

// sortNewestFirst orders attempts by the restart count the agent recorded,
// then by creation time for containers without it.
func sortNewestFirst(cs []*runtimeapi.Container) {
	attempt := func(c *runtimeapi.Container) int64 {
		if n, err := strconv.ParseInt(c.GetAnnotations()[annotationRestartCount], 10, 64); err == nil {
			return n
		}
		return int64(c.GetMetadata().GetAttempt())
	}
	sort.SliceStable(cs, func(i, j int) bool {
		ai, aj := attempt(cs[i]), attempt(cs[j])
		if ai != aj {
			return ai > aj
		}
		return cs[i].GetCreatedAt() > cs[j].GetCreatedAt()
	})
}

// runningContainer returns the running attempt of a pod's container.
func (a *api) runningContainer(ctx context.Context, pod *v1.Pod, name string) (*runtimeapi.Container, error) {
	if err := checkContainerInSpec(pod, name); err != nil {
		return nil, err
	}
	cs, err := a.containerAttempts(ctx, pod, name)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			return c, nil
		}
	}
	return nil, errorf(http.StatusNotFound, "container %q in pod %s/%s is not running", name, pod.Namespace, pod.Name)
}

// readySandbox returns the pod's ready sandbox, for port forwarding.
func (a *api) readySandbox(ctx context.Context, pod *v1.Pod) (*runtimeapi.PodSandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, a.callTimeout)
	defer cancel()
	resp, err := a.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{labelPodUID: string(pod.UID)},
	}})
	if err != nil {
		return nil, errorf(http.StatusInternalServerError, "list sandboxes of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	var newest *runtimeapi.PodSandbox
	for _, sb := range resp.GetItems() {
		if newest == nil || sb.GetCreatedAt() > newest.GetCreatedAt() {
			newest = sb
		}
	}
	if newest == nil {
		return nil, errorf(http.StatusNotFound, "pod %s/%s has no running sandbox", pod.Namespace, pod.Name)
	}
	return newest, nil
}
