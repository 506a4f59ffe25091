package podnet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// scenario is a Manager on a fake clientset and a fake kernel, its
// informer running; sync is called by the test.
type scenario struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	kernel *fakeKernel
	m      *Manager
	root   string
	conf   string
}

func newScenario(t *testing.T, kernel *fakeKernel, root, conf string, nodes ...runtime.Object) *scenario {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	cluster, err := ParseClusterCIDRs("10.244.0.0/16,fd00:10:244::/56")
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(nodes...)
	m, err := New(Config{NodeName: "self", Client: kubetest.Wrap(client), RootDir: root, ConfDir: conf, Bridge: "na-cni0", ClusterCIDRs: cluster, Kernel: kernel})
	if err != nil {
		t.Fatal(err)
	}
	wait := kube.Start(ctx, m.selfInformer, m.nodesInformer)
	t.Cleanup(func() { cancel(); wait() })
	if !cache.WaitForCacheSync(ctx.Done(), m.selfInformer.HasSynced, m.nodesInformer.HasSynced) {
		t.Fatal("informer did not sync")
	}
	return &scenario{t: t, ctx: ctx, client: client, kernel: kernel, m: m, root: root, conf: conf}
}

// sync waits until the lister holds what the clientset has, then runs one pass.
func (s *scenario) sync() {
	s.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		want, _ := s.client.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{})
		have, _ := s.m.nodes.List(labelsEverything())
		self, _ := s.m.self.List(labelsEverything())
		var wantSelf []v1.Node
		for _, n := range want.Items {
			if n.Name == "self" {
				wantSelf = append(wantSelf, n)
			}
		}
		if sameNodes(want.Items, have) && sameNodes(wantSelf, selfOnly(self)) {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatal("the informer did not catch up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.m.sync(s.ctx); err != nil {
		s.t.Fatalf("sync: %v", err)
	}
}

// selfOnly drops other nodes: the fake clientset ignores field selectors.
func selfOnly(nodes []*v1.Node) []*v1.Node {
	var out []*v1.Node
	for _, n := range nodes {
		if n.Name == "self" {
			out = append(out, n)
		}
	}
	return out
}

func sameNodes(want []v1.Node, have []*v1.Node) bool {
	if len(want) != len(have) {
		return false
	}
	// The fake clientset keeps no resource versions: compare what matters.
	byName := map[string]*v1.Node{}
	for _, n := range have {
		byName[n.Name] = n
	}
	for _, n := range want {
		got, ok := byName[n.Name]
		if !ok || !reflect.DeepEqual(got.Spec, n.Spec) || !reflect.DeepEqual(got.Status, n.Status) {
			return false
		}
	}
	return true
}

func (s *scenario) update(n *v1.Node) {
	s.t.Helper()
	cur, err := s.client.CoreV1().Nodes().Get(s.ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	n.ResourceVersion = cur.ResourceVersion
	if _, err := s.client.CoreV1().Nodes().Update(s.ctx, n, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *scenario) delete(name string) {
	s.t.Helper()
	if err := s.client.CoreV1().Nodes().Delete(s.ctx, name, metav1.DeleteOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *scenario) wantRoutes(want ...string) {
	s.t.Helper()
	slices.Sort(want)
	if got := s.kernel.routes.strings(); !reflect.DeepEqual(got, want) {
		s.t.Errorf("routes =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func (s *scenario) conflist() string {
	b, err := os.ReadFile(filepath.Join(s.conf, ConflistName))
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

func TestManagerRoutesFollowNodes(t *testing.T) {
	kernel := newFakeKernel()
	// Someone else's route to a node's pod CIDR, and a default route.
	kernel.routes.table = []TableRoute{
		{Route: route("10.244.9.0/24", "10.0.0.1")},
		{Route: route("0.0.0.0/0", "192.168.0.254")},
	}
	root, conf := t.TempDir(), t.TempDir()
	s := newScenario(t, kernel, root, conf,
		testNode("self", []string{"10.244.0.0/24"}, "InternalIP=192.168.0.1"),
		testNode("b", []string{"10.244.1.0/24"}, "InternalIP=192.168.0.2"),
		testNode("c", []string{"10.244.2.0/24", "fd00:10:244:2::/64"}, "InternalIP=192.168.0.3", "InternalIP=fd00::3"),
		testNode("taken", []string{"10.244.9.0/24"}, "InternalIP=192.168.0.9"),
	)
	s.sync()
	s.wantRoutes(
		"0.0.0.0/0 via 192.168.0.254", "10.244.9.0/24 via 10.0.0.1",
		"10.244.1.0/24 via 192.168.0.2 ours", "10.244.2.0/24 via 192.168.0.3 ours", "fd00:10:244:2::/64 via fd00::3 ours")

	t.Run("a node's address changes", func(t *testing.T) {
		s.update(testNode("b", []string{"10.244.1.0/24"}, "InternalIP=192.168.0.22"))
		s.sync()
		s.wantRoutes(
			"0.0.0.0/0 via 192.168.0.254", "10.244.9.0/24 via 10.0.0.1",
			"10.244.1.0/24 via 192.168.0.22 ours", "10.244.2.0/24 via 192.168.0.3 ours", "fd00:10:244:2::/64 via fd00::3 ours")
	})
	t.Run("a route someone deleted comes back", func(t *testing.T) {
		_ = kernel.routes.Delete(route("10.244.1.0/24", "192.168.0.22"))
		s.sync()
		s.wantRoutes(
			"0.0.0.0/0 via 192.168.0.254", "10.244.9.0/24 via 10.0.0.1",
			"10.244.1.0/24 via 192.168.0.22 ours", "10.244.2.0/24 via 192.168.0.3 ours", "fd00:10:244:2::/64 via fd00::3 ours")
	})
	t.Run("a deleted node's routes go", func(t *testing.T) {
		s.delete("c")
		s.sync()
		s.wantRoutes("0.0.0.0/0 via 192.168.0.254", "10.244.9.0/24 via 10.0.0.1", "10.244.1.0/24 via 192.168.0.22 ours")
	})
	t.Run("after a restart, the route of a node deleted meanwhile goes", func(t *testing.T) {
		// The agent was down while b was deleted: a new Manager on the same
		// machine finds b's route by its protocol.
		s2 := newScenario(t, kernel, root, conf,
			testNode("self", []string{"10.244.0.0/24"}, "InternalIP=192.168.0.1"),
			testNode("d", []string{"10.244.4.0/24"}, "InternalIP=192.168.0.4"),
		)
		s2.sync()
		s2.wantRoutes("0.0.0.0/0 via 192.168.0.254", "10.244.9.0/24 via 10.0.0.1", "10.244.4.0/24 via 192.168.0.4 ours")
	})
}

func TestManagerConflistRulesAndRemoval(t *testing.T) {
	kernel := newFakeKernel()
	kernel.routes.table = []TableRoute{{Route: route("0.0.0.0/0", "192.168.0.254")}}
	root, conf := t.TempDir(), t.TempDir()
	s := newScenario(t, kernel, root, conf,
		testNode("self", nil, "InternalIP=192.168.0.1"),
		testNode("b", []string{"10.244.1.0/24"}, "InternalIP=192.168.0.2"),
	)

	// Registered without a pod CIDR yet: nothing is written, nothing fails.
	s.sync()
	if _, err := os.Stat(filepath.Join(conf, ConflistName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("conflist written before the node has a pod CIDR: %v", err)
	}
	if HasState(root) || len(kernel.calls) != 0 {
		t.Fatalf("state %t, kernel calls %v before the node has a pod CIDR", HasState(root), kernel.calls)
	}

	s.update(testNode("self", []string{"10.244.0.0/24"}, "InternalIP=192.168.0.1"))
	s.sync()
	first := s.conflist()
	if !strings.Contains(first, `"subnet": "10.244.0.0/24"`) || !strings.Contains(first, `"bridge": "na-cni0"`) ||
		!strings.Contains(first, filepath.Join(root, ipamDirName)) {
		t.Errorf("conflist:\n%s", first)
	}
	if fi, err := os.Stat(filepath.Join(conf, ConflistName)); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("conflist mode: %v %v", fi.Mode(), err)
	}
	if !kernel.forwarding[false] || kernel.forwarding[true] {
		t.Errorf("forwarding = %v, want IPv4 only", kernel.forwarding)
	}
	wantV4 := []string{
		"nat POSTROUTING -s 10.244.0.0/24 ! -d 10.244.0.0/16 -m comment --comment " + masqueradeComment + " -j MASQUERADE",
		"filter FORWARD -s 10.244.0.0/16 -m comment --comment " + forwardComment + " -j ACCEPT",
		"filter FORWARD -d 10.244.0.0/16 -m comment --comment " + forwardComment + " -j ACCEPT",
	}
	if got := kernel.rules[false].rules; !reflect.DeepEqual(got, wantV4) {
		t.Errorf("IPv4 rules =\n%v\nwant\n%v", got, wantV4)
	}
	if slices.Contains(kernel.calls, "rules ipv6=true") {
		t.Error("ip6tables used for an IPv4-only node")
	}

	// Unchanged: the file is not rewritten.
	fi1, _ := os.Stat(filepath.Join(conf, ConflistName))
	time.Sleep(10 * time.Millisecond)
	s.sync()
	if fi2, _ := os.Stat(filepath.Join(conf, ConflistName)); !fi2.ModTime().Equal(fi1.ModTime()) {
		t.Error("the conflist was rewritten with the same content")
	}

	// The pod CIDRs change (dual-stack now): file rewritten, old rules gone.
	s.update(testNode("self", []string{"10.244.5.0/24", "fd00:10:244:5::/64"}, "InternalIP=192.168.0.1"))
	s.sync()
	if second := s.conflist(); !strings.Contains(second, `"subnet": "10.244.5.0/24"`) || !strings.Contains(second, `"subnet": "fd00:10:244:5::/64"`) {
		t.Errorf("conflist after the change:\n%s", second)
	}
	for _, r := range kernel.rules[false].rules {
		if strings.Contains(r, "10.244.0.0/24") {
			t.Errorf("rule of the old pod CIDR left: %s", r)
		}
	}
	if len(kernel.rules[true].rules) != 3 || !kernel.forwarding[true] {
		t.Errorf("IPv6 rules %v forwarding %v", kernel.rules[true].rules, kernel.forwarding)
	}
	st, err := readState(filepath.Join(root, StateFileName))
	if err != nil || st == nil || len(st.Rules) != 6 || st.Bridge != "na-cni0" || st.RouteProtocol != RouteProtocol {
		t.Fatalf("state = %+v, %v", st, err)
	}
	s.wantRoutes("0.0.0.0/0 via 192.168.0.254", "10.244.1.0/24 via 192.168.0.2 ours")

	// Turned off: everything made goes, others' things stay.
	other := filepath.Join(conf, "20-other.conflist")
	if err := os.WriteFile(other, []byte(`{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, ipamDirName, NetworkName), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Remove(s.ctx, root, kernel); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(conf, ConflistName), filepath.Join(root, StateFileName), filepath.Join(root, ipamDirName)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there (%v)", p, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("someone else's conflist removed: %v", err)
	}
	if len(kernel.rules[false].rules)+len(kernel.rules[true].rules) != 0 {
		t.Errorf("rules left: %v %v", kernel.rules[false].rules, kernel.rules[true].rules)
	}
	if !reflect.DeepEqual(kernel.bridges, []string{"na-cni0"}) {
		t.Errorf("bridges deleted: %v", kernel.bridges)
	}
	s.wantRoutes("0.0.0.0/0 via 192.168.0.254")

	// Off again, with nothing recorded: not a single call.
	kernel.calls = nil
	if err := Remove(s.ctx, root, kernel); err != nil || len(kernel.calls) != 0 {
		t.Errorf("Remove without state: %v, calls %v", err, kernel.calls)
	}
}

func TestRemoveKeepsAConflistThatIsNoLongerOurs(t *testing.T) {
	root, conf := t.TempDir(), t.TempDir()
	path := filepath.Join(conf, ConflistName)
	if err := writeState(filepath.Join(root, StateFileName), &state{Conflist: path}); err != nil {
		t.Fatal(err)
	}
	// A CNI DaemonSet took the file name over.
	if err := os.WriteFile(path, []byte(`{"cniVersion":"1.0.0","name":"flannel","plugins":[{"type":"flannel"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	if err := Remove(ctx, root, newFakeKernel()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("a conflist that is not the agent's was removed: %v", err)
	}
	if HasState(root) {
		t.Error("state file left")
	}
}

func TestRemoveFailureKeepsTheRecord(t *testing.T) {
	root := t.TempDir()
	if err := writeState(filepath.Join(root, StateFileName), &state{Rules: []Rule{{Table: "nat", Chain: "POSTROUTING", Spec: []string{"-j", "MASQUERADE"}}}}); err != nil {
		t.Fatal(err)
	}
	kernel := newFakeKernel()
	kernel.rulesErr = errors.New("no iptables")
	_, ctx := ktesting.NewTestContext(t)
	if err := Remove(ctx, root, kernel); err == nil {
		t.Fatal("no error")
	}
	if !HasState(root) {
		t.Error("the record went although a rule may be left")
	}
}

func labelsEverything() labels.Selector { return labels.Everything() }

// A node whose credentials may read only its own Node (the node
// authorizer's default) still gets its configuration and rules; routes
// wait, and no route of an earlier run is removed meanwhile.
func TestManagerWithoutTheGrantToListNodes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(
		testNode("self", []string{"10.244.0.0/24"}, "InternalIP=192.168.0.1"),
		testNode("b", []string{"10.244.1.0/24"}, "InternalIP=192.168.0.2"),
	)
	client.PrependReactor("list", "nodes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.(k8stesting.ListAction).GetListRestrictions().Fields.Empty() {
			return true, nil, apierrors.NewForbidden(v1.Resource("nodes"), "", errors.New("node 'self' cannot read all nodes, only its own Node object"))
		}
		return false, nil, nil
	})
	kernel := newFakeKernel()
	kernel.routes.table = []TableRoute{{Route: route("10.244.7.0/24", "192.168.0.7"), Ours: true}}
	cluster, _ := ParseClusterCIDRs("10.244.0.0/16")
	conf := t.TempDir()
	m, err := New(Config{NodeName: "self", Client: kubetest.Wrap(client), RootDir: t.TempDir(), ConfDir: conf, Bridge: "na-cni0",
		ClusterCIDRs: cluster, Kernel: kernel, ResyncPeriod: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(conf, ConflistName)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no conflist without the grant to list Nodes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if got := kernel.routes.strings(); !reflect.DeepEqual(got, []string{"10.244.7.0/24 via 192.168.0.7 ours"}) {
		t.Errorf("routes = %v", got)
	}
	if !m.forbiddenLogged.Load() {
		t.Error("the missing grant was not reported")
	}
}
