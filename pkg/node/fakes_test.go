package node

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// fakeRuntime is a CRI runtime whose answers the test sets.
type fakeRuntime struct {
	mu           sync.Mutex
	down         bool // every call fails, as when containerd is stopped
	runtimeReady bool
	networkReady bool
	images       []*runtimeapi.Image
	calls        []string
	// podCIDRs are the pod CIDRs UpdateRuntimeConfig accepted, in order.
	podCIDRs []string
	// configErr fails UpdateRuntimeConfig.
	configErr error
}

var _ Runtime = (*fakeRuntime)(nil)

var errRuntimeDown = errors.New("rpc error: code = Unavailable desc = connection refused")

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{runtimeReady: true, networkReady: true, images: []*runtimeapi.Image{
		{Id: "small", RepoTags: []string{"registry.k8s.io/pause:3.10"}, Size: 300},
		{Id: "big", RepoTags: []string{"nginx:1"}, RepoDigests: []string{"nginx@sha256:abc"}, Size: 9000},
	}}
}

func (f *fakeRuntime) set(fn func(*fakeRuntime)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeRuntime) Version(context.Context) (*runtimeapi.VersionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "Version")
	if f.down {
		return nil, errRuntimeDown
	}
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "v2.1.4"}, nil
}

func (f *fakeRuntime) Status(context.Context) (*runtimeapi.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "Status")
	if f.down {
		return nil, errRuntimeDown
	}
	net := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: f.networkReady}
	if !f.networkReady {
		net.Reason, net.Message = "NetworkPluginNotReady", "Network plugin returns error: cni plugin not initialized"
	}
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: f.runtimeReady},
		net,
	}}}, nil
}

func (f *fakeRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "ListImages")
	if f.down {
		return nil, errRuntimeDown
	}
	return f.images, nil
}

func (f *fakeRuntime) UpdateRuntimeConfig(_ context.Context, cfg *runtimeapi.RuntimeConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "UpdateRuntimeConfig")
	switch {
	case f.down:
		return errRuntimeDown
	case f.configErr != nil:
		return f.configErr
	}
	f.podCIDRs = append(f.podCIDRs, cfg.GetNetworkConfig().GetPodCidr())
	return nil
}

// sentPodCIDRs returns what UpdateRuntimeConfig accepted so far.
func (f *fakeRuntime) sentPodCIDRs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.podCIDRs...)
}

// fakeHost returns fixed machine facts.
type fakeHost struct{ m Machine }

func (h fakeHost) Read() (Machine, error) { return h.m, nil }

// countingHost returns its machine facts, changeable, and counts the reads.
type countingHost struct {
	mu    sync.Mutex
	m     Machine
	reads int
}

func (h *countingHost) Read() (Machine, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads++
	return h.m, nil
}

func testMachine() Machine {
	return Machine{
		NumCPU:                4,
		MemoryBytes:           8 << 30,
		HugePages:             map[string]int64{"2Mi": 0, "1Gi": 0},
		EphemeralStorageBytes: 100 << 30,
		MachineID:             "mid",
		SystemUUID:            "uuid",
		BootID:                "boot",
		KernelVersion:         "6.8.0",
		OSImage:               "Debian GNU/Linux 13 (trixie)",
	}
}

var testStart = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// testEnv is a Controller wired to a fake clientset, runtime and clock.
type testEnv struct {
	client *fake.Clientset
	rt     *fakeRuntime
	clock  *clocktesting.FakeClock
	ctrl   *Controller
}

func baseConfig() Config {
	return Config{
		NodeName:               "nodeagent-node",
		NodeIPs:                []net.IP{net.ParseIP("10.0.0.5")},
		Labels:                 map[string]string{"node.kubernetes.io/pool": "a"},
		Taints:                 []v1.Taint{{Key: "dedicated", Value: "agent", Effect: v1.TaintEffectNoSchedule}},
		ControllerAttachDetach: true,
		MaxPods:                110,
		EvictionHard: map[string]Threshold{
			signalMemoryAvailable: {Quantity: resource.NewQuantity(100<<20, resource.BinarySI)},
			signalNodeFSAvailable: {Percentage: 0.1},
		},
		MaxImages:             50,
		StatusUpdateFrequency: 10 * time.Second,
		StatusReportFrequency: 5 * time.Minute,
		LeaseDurationSeconds:  40,
		KubeletPort:           10250,
		KubeletVersion:        "v1.37.1",
	}
}

func newTestEnv(t *testing.T, mutate func(*Config)) *testEnv {
	t.Helper()
	e := &testEnv{client: fake.NewClientset(), rt: newFakeRuntime(), clock: clocktesting.NewFakeClock(testStart)}
	cfg := baseConfig()
	cfg.Client, cfg.Runtime, cfg.Host, cfg.Clock = kubetest.Wrap(e.client), e.rt, fakeHost{testMachine()}, e.clock
	if mutate != nil {
		mutate(&cfg)
	}
	ctrl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.ctrl = ctrl
	return e
}

func (e *testEnv) node(t *testing.T) *v1.Node {
	t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), "nodeagent-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func condition(n *v1.Node, typ v1.NodeConditionType) v1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return v1.NodeCondition{}
}

// countActions counts client calls with the given verb on the resource.
func (e *testEnv) countActions(verb, resource string) int {
	n := 0
	for _, a := range e.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}
