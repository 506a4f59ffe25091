package node

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

func TestRegisterCreatesTruthfulNode(t *testing.T) {
	e := newTestEnv(t, nil)
	if err := e.ctrl.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := e.node(t)

	wantLabels := map[string]string{
		"kubernetes.io/hostname": "nodeagent-node", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "node.kubernetes.io/pool": "a",
	}
	for k, v := range wantLabels {
		if k == "kubernetes.io/arch" || k == "beta.kubernetes.io/arch" {
			v = n.Status.NodeInfo.Architecture
		}
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if n.Annotations[annotationControllerManagedAttach] != "true" {
		t.Errorf("missing controller-managed attach-detach annotation")
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "dedicated" {
		t.Errorf("taints = %v", n.Spec.Taints)
	}
	if got := n.Status.Addresses; len(got) != 2 || got[0] != (v1.NodeAddress{Type: v1.NodeInternalIP, Address: "10.0.0.5"}) ||
		got[1] != (v1.NodeAddress{Type: v1.NodeHostName, Address: "nodeagent-node"}) {
		t.Errorf("addresses = %v", got)
	}
	// What the serving certificate is requested for.
	if got := e.ctrl.Addresses(); len(got) != 2 || got[0] != n.Status.Addresses[0] || got[1] != n.Status.Addresses[1] {
		t.Errorf("Addresses() = %v, want the status's %v", got, n.Status.Addresses)
	}
	checkQuantity(t, n.Status.Capacity, v1.ResourceCPU, "4")
	checkQuantity(t, n.Status.Capacity, v1.ResourceMemory, "8Gi")
	checkQuantity(t, n.Status.Capacity, v1.ResourcePods, "110")
	checkQuantity(t, n.Status.Capacity, "hugepages-2Mi", "0")
	checkQuantity(t, n.Status.Allocatable, v1.ResourceMemory, "8092Mi")
	checkQuantity(t, n.Status.Allocatable, v1.ResourceEphemeralStorage, "96636764k")
	info := n.Status.NodeInfo
	if info.ContainerRuntimeVersion != "containerd://2.1.4" || info.KubeletVersion != "v1.37.1" || info.MachineID != "mid" ||
		info.BootID != "boot" || info.OSImage != "Debian GNU/Linux 13 (trixie)" || info.OperatingSystem != "linux" {
		t.Errorf("nodeInfo = %+v", info)
	}
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("kubelet port = %d", n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}
	if len(n.Status.Images) != 2 || n.Status.Images[0].Names[0] != "nginx@sha256:abc" {
		t.Errorf("images = %v, want largest first, digests first", n.Status.Images)
	}
	ready := condition(n, v1.NodeReady)
	if ready.Status != v1.ConditionTrue || ready.Reason != "KubeletReady" || ready.Message != "kubelet is posting ready status" {
		t.Errorf("Ready = %+v", ready)
	}
	if c := condition(n, v1.NodeMemoryPressure); c.Status != v1.ConditionFalse || c.Reason != "KubeletHasSufficientMemory" {
		t.Errorf("MemoryPressure = %+v", c)
	}
	if e.ctrl.nodeUID() != n.UID {
		t.Errorf("controller UID %q, node UID %q", e.ctrl.nodeUID(), n.UID)
	}
}

func checkQuantity(t *testing.T, list v1.ResourceList, name v1.ResourceName, want string) {
	t.Helper()
	got, ok := list[name]
	if !ok || got.Cmp(resource.MustParse(want)) != 0 {
		t.Errorf("%s = %s, want %s", name, got.String(), want)
	}
}

func TestRegisterReconcilesExistingNode(t *testing.T) {
	e := newTestEnv(t, nil)
	existing := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeagent-node", UID: "old-uid", Labels: map[string]string{
			"kubernetes.io/hostname": "stale", "node-role.kubernetes.io/control-plane": "",
		}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
			{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse, Reason: "RouteCreated"},
		}},
	}
	if _, err := e.client.CoreV1().Nodes().Create(context.Background(), existing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.ctrl.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	nodes, _ := e.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if len(nodes.Items) != 1 {
		t.Fatalf("%d nodes, want exactly one", len(nodes.Items))
	}
	n := nodes.Items[0]
	if n.Labels["kubernetes.io/hostname"] != "nodeagent-node" || n.Labels["node.kubernetes.io/pool"] != "a" {
		t.Errorf("labels not reconciled: %v", n.Labels)
	}
	if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("a label set by an administrator was removed")
	}
	if c := condition(&n, v1.NodeNetworkUnavailable); c.Reason != "RouteCreated" {
		t.Errorf("a condition owned by another component was lost: %v", n.Status.Conditions)
	}
	if condition(&n, v1.NodeReady).Status != v1.ConditionTrue {
		t.Errorf("Ready not set on reconciled node")
	}
	if e.ctrl.nodeUID() != "old-uid" {
		t.Errorf("UID = %q, want the existing node's", e.ctrl.nodeUID())
	}
}

func TestDeletedNodeIsRegisteredAgain(t *testing.T) {
	e := newTestEnv(t, nil)
	ctx := context.Background()
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.client.CoreV1().Nodes().Delete(ctx, "nodeagent-node", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(10 * time.Second)
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.node(t); condition(n, v1.NodeReady).Status != v1.ConditionTrue {
		t.Errorf("re-registered node not Ready: %v", n.Status.Conditions)
	}
	if got := e.countActions("create", "nodes"); got != 2 {
		t.Errorf("%d node creates, want 2", got)
	}
}

func TestReadyFollowsRuntime(t *testing.T) {
	e := newTestEnv(t, nil)
	ctx := context.Background()
	step := func(d time.Duration) *v1.Node {
		t.Helper()
		e.clock.Step(d)
		if err := e.ctrl.sync(ctx); err != nil {
			t.Fatal(err)
		}
		return e.node(t)
	}
	n := step(0)
	readySince := condition(n, v1.NodeReady).LastTransitionTime

	// Network plugin not ready: NotReady at once, with the runtime's words.
	e.rt.set(func(f *fakeRuntime) { f.networkReady = false })
	n = step(10 * time.Second)
	ready := condition(n, v1.NodeReady)
	wantMsg := "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	if ready.Status != v1.ConditionFalse || ready.Reason != "KubeletNotReady" || ready.Message != wantMsg {
		t.Fatalf("Ready = %+v", ready)
	}
	if ready.LastTransitionTime.Equal(&readySince) {
		t.Errorf("transition time did not move")
	}
	e.rt.set(func(f *fakeRuntime) { f.networkReady = true })
	if ready = condition(step(10*time.Second), v1.NodeReady); ready.Status != v1.ConditionTrue {
		t.Fatalf("Ready after network recovery = %+v", ready)
	}

	// Runtime stops answering: one missed check is tolerated, then "down".
	e.rt.set(func(f *fakeRuntime) { f.down = true })
	if ready = condition(step(10*time.Second), v1.NodeReady); ready.Status != v1.ConditionTrue {
		t.Fatalf("Ready flipped on the first missed check: %+v", ready)
	}
	ready = condition(step(30*time.Second), v1.NodeReady)
	if ready.Status != v1.ConditionFalse || ready.Message != "container runtime is down" {
		t.Fatalf("Ready with runtime down = %+v", ready)
	}
	e.rt.set(func(f *fakeRuntime) { f.down = false })
	if ready = condition(step(10*time.Second), v1.NodeReady); ready.Status != v1.ConditionTrue {
		t.Fatalf("Ready after runtime recovery = %+v", ready)
	}
}

func TestStatusWrittenOnChangeOrReportFrequency(t *testing.T) {
	e := newTestEnv(t, nil)
	ctx := context.Background()
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	patches := func() int { return e.countActions("patch", "nodes") }
	for i := 0; i < 5; i++ {
		e.clock.Step(10 * time.Second)
		if err := e.ctrl.sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := patches(); got != 0 {
		t.Fatalf("%d patches while nothing changed, want 0", got)
	}
	e.rt.set(func(f *fakeRuntime) { f.images = f.images[:1] })
	e.clock.Step(10 * time.Second)
	_ = e.ctrl.sync(ctx)
	if got := patches(); got != 1 {
		t.Fatalf("%d patches after an image change, want 1", got)
	}
	e.clock.Step(5 * time.Minute)
	_ = e.ctrl.sync(ctx)
	if got := patches(); got != 2 {
		t.Fatalf("%d patches after the report frequency, want 2", got)
	}
	if hb := condition(e.node(t), v1.NodeReady).LastHeartbeatTime; !hb.Time.Equal(e.clock.Now()) {
		t.Errorf("heartbeat %v, want %v", hb, e.clock.Now())
	}
}

func TestHostAndRuntimeFactsReadAgainOnlyWhenStale(t *testing.T) {
	host := &countingHost{m: testMachine()}
	e := newTestEnv(t, func(c *Config) { c.Host = host })
	ctx := context.Background()
	for range 6 {
		if err := e.ctrl.sync(ctx); err != nil {
			t.Fatal(err)
		}
		e.clock.Step(10 * time.Second)
	}
	if host.reads != 1 {
		t.Fatalf("machine read %d times over a minute of status updates, want once", host.reads)
	}
	calls := func(name string) int {
		e.rt.mu.Lock()
		defer e.rt.mu.Unlock()
		n := 0
		for _, c := range e.rt.calls {
			if c == name {
				n++
			}
		}
		return n
	}
	// Six updates over a minute: the runtime's status every time, its
	// images every 30 s, its version once.
	if s, i, v := calls("Status"), calls("ListImages"), calls("Version"); s != 6 || i != 2 || v != 1 {
		t.Errorf("over a minute: %d Status, %d ListImages, %d Version calls; want 6, 2, 1", s, i, v)
	}
	// A runtime away and back is asked its version again.
	e.rt.set(func(f *fakeRuntime) { f.down = true })
	_ = e.ctrl.sync(ctx)
	e.rt.set(func(f *fakeRuntime) { f.down = false })
	e.clock.Step(10 * time.Second)
	_ = e.ctrl.sync(ctx)
	if v := calls("Version"); v != 2 {
		t.Errorf("%d Version calls after the runtime came back, want 2", v)
	}
	host.mu.Lock()
	host.m.HugePages = map[string]int64{"2Mi": 512 << 20, "1Gi": 0}
	host.mu.Unlock()
	e.clock.Step(machineRefresh)
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if host.reads != 2 {
		t.Fatalf("machine read %d times, want again after %v", host.reads, machineRefresh)
	}
	got := e.node(t).Status.Capacity[v1.ResourceName("hugepages-2Mi")]
	if want := resource.MustParse("512Mi"); got.Cmp(want) != 0 {
		t.Errorf("hugepages-2Mi capacity %s after the refresh, want %s", got.String(), want.String())
	}
}

func TestRunRegistersAndStops(t *testing.T) {
	e := newTestEnv(t, nil)
	created := make(chan string, 4)
	e.client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		created <- a.GetResource().Resource
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.ctrl.Run(ctx) }()
	seen := map[string]bool{}
	for !seen["nodes"] || !seen["leases"] {
		seen[<-created] = true
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	_, err := New(Config{NodeName: "n"})
	if err == nil || !strings.Contains(err.Error(), "client, runtime and host are required") {
		t.Fatalf("New = %v", err)
	}
}

// With a watch of the Node, the periodic reads (status updates, the pod
// CIDR, admission) come from it and not from the apiserver; while the
// watch has no Node they GET it, so a deleted Node is still registered
// again.
func TestWatchedNodeReadsNoApiserver(t *testing.T) {
	var watchHasNode atomic.Bool
	var e *testEnv
	e = newTestEnv(t, func(c *Config) {
		c.Watched = func() (*v1.Node, error) {
			if !watchHasNode.Load() {
				return nil, apierrors.NewNotFound(v1.Resource("nodes"), "nodeagent-node")
			}
			// The tracker is the fake apiserver's store: reading it is not a request.
			o, err := e.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", "nodeagent-node")
			if err != nil {
				return nil, err
			}
			return o.(*v1.Node), nil
		}
	})
	ctx := context.Background()
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	e.setPodCIDR(t, "10.244.1.0/24")
	watchHasNode.Store(true)
	gets := func() int { return e.countActions("get", "nodes") }
	before := gets()
	for i := 0; i < 5; i++ {
		e.clock.Step(10 * time.Second)
		if err := e.ctrl.sync(ctx); err != nil {
			t.Fatal(err)
		}
		e.ctrl.podCIDR.sync(ctx)
		if _, err := e.ctrl.AdmissionNode(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := gets() - before; got != 0 {
		t.Errorf("%d node GETs with the watch holding the Node, want 0", got)
	}
	if got := e.rt.sentPodCIDRs(); !slices.Equal(got, []string{"10.244.1.0/24"}) {
		t.Errorf("runtime got pod CIDRs %v from the watched Node", got)
	}
	// A change is still written, computed from the watched Node.
	e.rt.set(func(f *fakeRuntime) { f.images = f.images[:1] })
	e.clock.Step(10 * time.Second)
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(e.node(t).Status.Images); got != 1 {
		t.Errorf("%d images in the status after the change, want 1", got)
	}

	// The Node deleted: the watch loses it, the apiserver confirms, the
	// Node is registered again.
	watchHasNode.Store(false)
	if err := e.client.CoreV1().Nodes().Delete(ctx, "nodeagent-node", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(10 * time.Second)
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.countActions("create", "nodes"); got != 2 {
		t.Errorf("%d node creates, want 2 (registered again)", got)
	}
}

// After the apiserver was away, the watched Node may be stale for as long
// as the watch's backoff: the node lifecycle controller's Ready Unknown,
// written on the apiserver's return, is then read with a GET and undone at
// the next status update, not a minute later.
func TestStaleWatchNotTrustedAfterTheApiserverFailed(t *testing.T) {
	var watched atomic.Pointer[v1.Node]
	e := newTestEnv(t, func(c *Config) {
		c.Watched = func() (*v1.Node, error) {
			if n := watched.Load(); n != nil {
				return n, nil
			}
			return nil, apierrors.NewNotFound(v1.Resource("nodes"), "nodeagent-node")
		}
	})
	ctx := context.Background()
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.ctrl.lease.renew(ctx); err != nil {
		t.Fatal(err)
	}
	// The watch holds the Node as registered, Ready, and stops there.
	watched.Store(e.node(t))

	// The apiserver goes away: a renewal fails.
	down := errors.New("connection refused")
	var away atomic.Bool
	away.Store(true)
	e.client.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if away.Load() {
			return true, nil, down
		}
		return false, nil, nil
	})
	e.clock.Step(10 * time.Second)
	if err := e.ctrl.lease.renew(ctx); err == nil {
		t.Fatal("renewal succeeded with the apiserver away")
	}
	// It returns, and the node lifecycle controller marks the node Unknown
	// before the watch has caught up.
	away.Store(false)
	n := e.node(t)
	for i := range n.Status.Conditions {
		if c := &n.Status.Conditions[i]; c.Type == v1.NodeReady {
			c.Status, c.Reason = v1.ConditionUnknown, "NodeStatusUnknown"
		}
	}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(10 * time.Second)
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := condition(e.node(t), v1.NodeReady).Status; got != v1.ConditionTrue {
		t.Fatalf("node Ready %s after the first status update since the apiserver's return, want True", got)
	}

	// Once the watch had time to catch up, it is read again without GETs.
	watched.Store(e.node(t))
	e.clock.Step(watchCatchUp)
	gets := e.countActions("get", "nodes")
	if err := e.ctrl.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.countActions("get", "nodes") - gets; got != 0 {
		t.Errorf("%d node GETs %s after the last failure, want the watch read", got, watchCatchUp)
	}
}

// A node not Ready when the agent starts is looked at again within a
// moment, not a whole status period later: it turns Ready as soon as the
// runtime is, as a starting kubelet's does.
func TestStartingNodeTurnsReadyWithinAMoment(t *testing.T) {
	e := newTestEnv(t, nil)
	e.rt.set(func(f *fakeRuntime) { f.networkReady = false })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.ctrl.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	ready := func() bool {
		n, err := e.client.CoreV1().Nodes().Get(ctx, "nodeagent-node", metav1.GetOptions{})
		return err == nil && condition(n, v1.NodeReady).Status == v1.ConditionTrue
	}
	registered := func() bool {
		_, err := e.client.CoreV1().Nodes().Get(ctx, "nodeagent-node", metav1.GetOptions{})
		return err == nil
	}
	for deadline := time.Now().Add(10 * time.Second); !registered(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the node was not registered")
		}
	}
	if ready() {
		t.Fatal("Ready with the network plugin not ready")
	}
	e.rt.set(func(f *fakeRuntime) { f.networkReady = true })
	// Step the agent's clock by half-seconds: Ready must come before a
	// whole status period (10 s) has passed.
	var stepped time.Duration
	for !ready() {
		if stepped >= 9*time.Second {
			t.Fatalf("not Ready %s after the runtime was", stepped)
		}
		if e.clock.HasWaiters() {
			e.clock.Step(500 * time.Millisecond)
			stepped += 500 * time.Millisecond
		}
		time.Sleep(5 * time.Millisecond)
	}
}
