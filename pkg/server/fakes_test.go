package server

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntime is a CRI runtime service holding sandboxes and containers in
// memory. It filters lists the way runtimes do and records stream requests.
type fakeRuntime struct {
	mu         sync.Mutex
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	logPaths   map[string]string // container ID -> log path
	states     map[string]runtimeapi.ContainerState
	exitCodes  map[string]int32
	streamURL  string
	execSync   *runtimeapi.ExecSyncResponse
	err        error

	execs    []*runtimeapi.ExecRequest
	attaches []*runtimeapi.AttachRequest
	forwards []*runtimeapi.PortForwardRequest
	syncs    []*runtimeapi.ExecSyncRequest
}

var _ RuntimeService = (*fakeRuntime)(nil)

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, in *runtimeapi.ListPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []*runtimeapi.PodSandbox
	for _, sb := range f.sandboxes {
		if st := in.GetFilter().GetState(); st != nil && st.State != sb.State {
			continue
		}
		if matches(in.GetFilter().GetLabelSelector(), sb.Labels) {
			out = append(out, sb)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func (f *fakeRuntime) ListContainers(_ context.Context, in *runtimeapi.ListContainersRequest, _ ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []*runtimeapi.Container
	for _, c := range f.containers {
		if st := in.GetFilter().GetState(); st != nil && st.State != c.State {
			continue
		}
		if matches(in.GetFilter().GetLabelSelector(), c.Labels) {
			out = append(out, c)
		}
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.Id == in.ContainerId {
			state := c.State
			if s, ok := f.states[c.Id]; ok {
				state = s
			}
			return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
				Id: c.Id, State: state, LogPath: f.logPaths[c.Id], ExitCode: f.exitCodes[c.Id],
			}}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "container %q not found", in.ContainerId)
}

func (f *fakeRuntime) setState(id string, s runtimeapi.ContainerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.states == nil {
		f.states = map[string]runtimeapi.ContainerState{}
	}
	f.states[id] = s
}

func (f *fakeRuntime) ExecSync(_ context.Context, in *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncs = append(f.syncs, in)
	return f.execSync, f.err
}

func (f *fakeRuntime) Exec(_ context.Context, in *runtimeapi.ExecRequest, _ ...grpc.CallOption) (*runtimeapi.ExecResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execs = append(f.execs, in)
	return &runtimeapi.ExecResponse{Url: f.streamURL}, f.err
}

func (f *fakeRuntime) Attach(_ context.Context, in *runtimeapi.AttachRequest, _ ...grpc.CallOption) (*runtimeapi.AttachResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attaches = append(f.attaches, in)
	return &runtimeapi.AttachResponse{Url: f.streamURL}, f.err
}

func (f *fakeRuntime) PortForward(_ context.Context, in *runtimeapi.PortForwardRequest, _ ...grpc.CallOption) (*runtimeapi.PortForwardResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forwards = append(f.forwards, in)
	return &runtimeapi.PortForwardResponse{Url: f.streamURL}, f.err
}

// testPod is the base fixture: default/web with containers app and sidecar.
func testPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-1"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "init"}},
			Containers:     []v1.Container{{Name: "app", Image: "nginx"}, {Name: "sidecar", Image: "busybox"}},
		},
	}
}

func podLabels(pod *v1.Pod) map[string]string {
	return map[string]string{labelPodNamespace: pod.Namespace, labelPodName: pod.Name, labelPodUID: string(pod.UID)}
}

func testSandbox(id string, pod *v1.Pod, state runtimeapi.PodSandboxState, created int64) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{Id: id, State: state, CreatedAt: created, Labels: podLabels(pod)}
}

func testContainer(id string, pod *v1.Pod, name, restartCount string, state runtimeapi.ContainerState, created int64) *runtimeapi.Container {
	labels := podLabels(pod)
	labels[labelContainerName] = name
	ann := map[string]string{}
	if restartCount != "" {
		ann[annotationRestartCount] = restartCount
	}
	return &runtimeapi.Container{
		Id: id, State: state, CreatedAt: created, Labels: labels, Annotations: ann,
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: "sha256:abc", UserSpecifiedImage: "docker.io/library/" + name},
	}
}

// testAPI builds the endpoints over a fake runtime and the given pods, with
// the debugging handlers on, as they are by default.
func testAPI(rt *fakeRuntime, pods ...*v1.Pod) *api {
	return &api{
		nodeName:    "node-1",
		pods:        func() []*v1.Pod { return pods },
		runtime:     rt,
		callTimeout: defaultRuntimeRequestTimeout,
		debugging:   true,
	}
}
