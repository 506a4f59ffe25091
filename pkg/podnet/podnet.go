// Package podnet is the agent's own pod network, for clusters without a CNI
// DaemonSet (opt-in, --pod-network=bridge). From the Node's spec.podCIDRs it
// writes the runtime's CNI configuration (a bridge with host-local
// addresses, and portmap), routes every other node's pod CIDR via that
// node's InternalIP (host-gw: the nodes share an L2 segment), and
// masquerades pod traffic leaving the cluster CIDR. What it makes is
// recorded in a state file under the root dir; an agent started with the
// setting off removes it all (Remove). Stopping the agent removes nothing:
// pods keep their network across restarts.
package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

const (
	// defaultResyncPeriod is how often everything is checked again without
	// an event: a route or rule someone deleted comes back within it.
	defaultResyncPeriod = time.Minute
	// Retries after a failure start fast and back off to the resync period.
	retryInitial = time.Second
	// ipamDirName is host-local's data dir under the root dir.
	ipamDirName = "pod-network-ipam"
)

// Config configures a Manager.
type Config struct {
	// NodeName is this node's Node.
	NodeName string
	// Client reads the Nodes (all of them: each one's pod CIDR is routed).
	Client kube.Interface
	// RootDir is the agent's root dir: the state file and host-local's
	// allocations live there.
	RootDir string
	// ConfDir is the runtime's CNI configuration directory.
	ConfDir string
	// Bridge is the bridge device of the pods.
	Bridge string
	// ClusterCIDRs are the cluster's pod ranges, at most one per family
	// (ParseClusterCIDRs); traffic from the pods to anywhere else is
	// masqueraded.
	ClusterCIDRs []*net.IPNet
	// Kernel changes routes, rules and sysctls; nil means HostKernel.
	Kernel Kernel
	// ResyncPeriod is how often all is checked without an event; zero
	// means a minute.
	ResyncPeriod time.Duration
}

func (c *Config) validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("podnet: no node name")
	case c.Client == nil:
		return errors.New("podnet: no apiserver client")
	case !filepath.IsAbs(c.RootDir):
		return fmt.Errorf("podnet: root dir %q is not absolute", c.RootDir)
	case !filepath.IsAbs(c.ConfDir):
		return fmt.Errorf("podnet: CNI configuration directory %q is not absolute", c.ConfDir)
	case c.Bridge == "":
		return errors.New("podnet: no bridge name")
	case len(c.ClusterCIDRs) == 0:
		return errors.New("podnet: no cluster CIDR")
	}
	return nil
}

// Manager keeps the node's pod network in place.
type Manager struct {
	cfg Config
	// self is this node's Node, watched by name (the node's credentials
	// may always read it): the configuration and rules follow it.
	self         corelisters.NodeLister
	selfInformer cache.SharedIndexInformer
	// nodes are all Nodes, for the routes. Reading them takes a grant
	// beyond the node authorizer's (deploy/pod-network/rbac.yaml); until
	// they are listed, routes are left as they are.
	nodes         corelisters.NodeLister
	nodesInformer cache.SharedIndexInformer
	wake          chan struct{}

	// Observed between passes, to log a state once rather than every pass.
	conflist        []byte
	waitLogged      bool
	routesWaitSaid  bool
	forbiddenLogged atomic.Bool
}

// New validates cfg and builds a Manager.
func New(cfg Config) (*Manager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Kernel == nil {
		cfg.Kernel = HostKernel{}
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = defaultResyncPeriod
	}
	m := &Manager{cfg: cfg, wake: make(chan struct{}, 1)}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { m.poke() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*v1.Node)
			n, ok2 := newObj.(*v1.Node)
			if !ok1 || !ok2 || routingChanged(o, n) {
				m.poke()
			}
		},
		DeleteFunc: func(any) { m.poke() },
	}
	nodes := cfg.Client.CoreV1().Nodes()
	m.selfInformer = kube.NewInformer(cfg.Client, nodes, &v1.Node{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.NodeName).String()
	})
	m.self = corelisters.NewNodeLister(m.selfInformer.GetIndexer())
	m.nodesInformer = kube.NewInformer(cfg.Client, nodes, &v1.Node{}, nil)
	m.nodes = corelisters.NewNodeLister(m.nodesInformer.GetIndexer())
	for _, inf := range []cache.SharedIndexInformer{m.selfInformer, m.nodesInformer} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, fmt.Errorf("podnet: watch nodes: %w", err)
		}
	}
	if err := m.nodesInformer.SetWatchErrorHandlerWithContext(m.nodesWatchError); err != nil {
		return nil, fmt.Errorf("podnet: watch nodes: %w", err)
	}
	return m, nil
}

// nodesWatchError tells once, plainly, what a node identity without the
// grant to read all Nodes needs; other errors go the informer's usual way.
func (m *Manager) nodesWatchError(ctx context.Context, r *cache.Reflector, err error) {
	if apierrors.IsForbidden(err) {
		if !m.forbiddenLogged.Swap(true) {
			klog.FromContext(ctx).Error(err, "The pod network cannot read the other Nodes, so it routes to none of them: "+
				"grant the nodes list and watch on Nodes (deploy/pod-network/rbac.yaml binds it to the group system:nodes)")
		}
		return
	}
	cache.DefaultWatchErrorHandler(ctx, r, err)
}

// poke wakes Run without ever blocking.
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// routingChanged reports whether a Node update matters to the network: its
// pod CIDRs or addresses. Heartbeats and image lists do not.
func routingChanged(o, n *v1.Node) bool {
	return !slices.Equal(podCIDRsOf(o), podCIDRsOf(n)) || !slices.Equal(o.Status.Addresses, n.Status.Addresses)
}

// Run keeps the network in place until ctx ends: a pass at every Node
// change and every resync period, and after a failure again with back-off.
// Failures are logged, never returned: the agent serves its pods with or
// without this network.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("podnet")
	ctx = klog.NewContext(ctx, logger)
	defer kube.Start(ctx, m.selfInformer, m.nodesInformer)()
	// The routes wait for all Nodes; a pass once they are listed makes
	// them without waiting for the next resync.
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if cache.WaitForCacheSync(ctx.Done(), m.nodesInformer.HasSynced) {
			m.poke()
		}
	}()
	if !cache.WaitForCacheSync(ctx.Done(), m.selfInformer.HasSynced) {
		return nil
	}
	retry := retryInitial
	for {
		wait := m.cfg.ResyncPeriod
		if err := m.sync(ctx); err != nil {
			logger.Error(err, "Pod network not in place; retrying", "retryIn", retry)
			wait, retry = retry, min(retry*2, m.cfg.ResyncPeriod)
		} else {
			retry = retryInitial
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-m.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (m *Manager) statePath() string { return filepath.Join(m.cfg.RootDir, StateFileName) }
func (m *Manager) conflistPath() string {
	return filepath.Join(m.cfg.ConfDir, ConflistName)
}

// sync brings the machine in line with the Nodes once.
func (m *Manager) sync(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	self, err := m.self.Get(m.cfg.NodeName)
	if apierrors.IsNotFound(err) {
		m.logWait(logger, "Pod network waits for the Node to be registered")
		return nil
	}
	if err != nil {
		return err
	}
	podCIDRs, err := ParsePodCIDRs(podCIDRsOf(self))
	if err != nil {
		return fmt.Errorf("node %s: %w", self.Name, err)
	}
	if len(podCIDRs) == 0 {
		m.logWait(logger, "Pod network waits for the Node's spec.podCIDRs (is the controller-manager's --allocate-node-cidrs on?)")
		return nil
	}
	m.waitLogged = false
	for _, c := range podCIDRs {
		if m.conflist != nil {
			break // said at the first pass
		}
		if sameFamily(m.cfg.ClusterCIDRs, c.IP.To4() == nil) == nil {
			logger.Info("The node's pod CIDR has no cluster CIDR of its family: its traffic is not masqueraded", "podCIDR", c.String())
		} else if cl := sameFamily(m.cfg.ClusterCIDRs, c.IP.To4() == nil); !cl.Contains(c.IP) {
			logger.Info("The node's pod CIDR is outside the cluster CIDR", "podCIDR", c.String(), "clusterCIDR", cl.String())
		}
	}

	// The record comes first, so that whatever is made next is found and
	// removed even if the agent stops half way.
	prev, err := readState(m.statePath())
	if err != nil {
		return err
	}
	rules := desiredRules(podCIDRs, m.cfg.ClusterCIDRs)
	st := &state{
		Conflist:      m.conflistPath(),
		Bridge:        m.cfg.Bridge,
		IPAMDataDir:   filepath.Join(m.cfg.RootDir, ipamDirName),
		RouteProtocol: RouteProtocol,
		Rules:         rules,
	}
	var stale []Rule
	if prev != nil {
		stale = staleRules(prev.Rules, rules)
		// The agent ran with another --cni-conf-dir or bridge before: what
		// it made there goes before the record forgets it.
		if prev.Conflist != "" && prev.Conflist != st.Conflist {
			if err := removeConflist(prev.Conflist); err != nil {
				return err
			}
		}
		if prev.Bridge != "" && prev.Bridge != st.Bridge {
			if err := m.cfg.Kernel.DeleteBridge(prev.Bridge); err != nil {
				return err
			}
		}
	}
	pending := *st
	pending.Rules = unionRules(rules, stale)
	if prev == nil || !stateEqual(prev, &pending) {
		if err := writeState(m.statePath(), &pending); err != nil {
			return fmt.Errorf("record pod network state: %w", err)
		}
	}

	var errs []error
	for _, v6 := range families(podCIDRs) {
		if err := m.cfg.Kernel.EnableForwarding(v6); err != nil {
			errs = append(errs, err)
		}
	}
	if err := m.writeConflist(ctx, podCIDRs, st.IPAMDataDir); err != nil {
		errs = append(errs, err)
	}
	if err := m.syncRules(ctx, rules, stale); err != nil {
		errs = append(errs, err)
	} else if len(stale) > 0 {
		if err := writeState(m.statePath(), st); err != nil {
			errs = append(errs, fmt.Errorf("record pod network state: %w", err))
		}
	}
	// Until every Node is listed, a missing one cannot be told from a
	// deleted one: no route is added or removed before.
	if !m.nodesInformer.HasSynced() {
		if !m.routesWaitSaid {
			logger.Info("Routes to other nodes' pods wait for the list of Nodes")
			m.routesWaitSaid = true
		}
		return errors.Join(errs...)
	}
	m.routesWaitSaid = false
	nodes, err := m.nodes.List(labels.Everything())
	if err != nil {
		errs = append(errs, err)
	} else if err := syncRoutes(ctx, m.cfg.Kernel.Routes(), desiredRoutes(m.cfg.NodeName, nodes)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (m *Manager) logWait(logger klog.Logger, msg string) {
	if !m.waitLogged {
		logger.Info(msg, "node", m.cfg.NodeName)
		m.waitLogged = true
	}
}

// writeConflist writes the CNI configuration when its content differs
// from the file's.
func (m *Manager) writeConflist(ctx context.Context, podCIDRs []*net.IPNet, ipamDir string) error {
	want, err := Conflist(ConflistConfig{Bridge: m.cfg.Bridge, PodCIDRs: podCIDRs, IPAMDataDir: ipamDir})
	if err != nil {
		return err
	}
	path := m.conflistPath()
	have, err := os.ReadFile(path)
	if err == nil && string(have) == string(want) {
		m.conflist = want
		return nil
	}
	if err := writeFileAtomic(path, want, 0o644); err != nil {
		return fmt.Errorf("write CNI configuration: %w", err)
	}
	logger := klog.FromContext(ctx)
	switch {
	case m.conflist != nil || (len(have) > 0 && isOurConflist(have)):
		logger.Info("Rewrote the CNI configuration: the node's pod CIDRs or settings changed", "path", path, "podCIDRs", cidrStrings(podCIDRs))
	default:
		logger.Info("Wrote the CNI configuration", "path", path, "podCIDRs", cidrStrings(podCIDRs), "bridge", m.cfg.Bridge)
	}
	m.conflist = want
	return nil
}

// syncRules adds the wanted rules (each once) and deletes the stale ones.
func (m *Manager) syncRules(ctx context.Context, want, stale []Rule) error {
	tables := map[bool]RuleTable{}
	table := func(v6 bool) (RuleTable, error) {
		if t, ok := tables[v6]; ok {
			return t, nil
		}
		t, err := m.cfg.Kernel.Rules(v6)
		if err == nil {
			tables[v6] = t
		}
		return t, err
	}
	var errs []error
	for _, r := range want {
		t, err := table(r.IPv6)
		if err == nil {
			err = t.AppendUnique(r.Table, r.Chain, r.Spec...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("add rule %s %s %v: %w", r.Table, r.Chain, r.Spec, err))
		}
	}
	for _, r := range stale {
		t, err := table(r.IPv6)
		if err == nil {
			err = t.DeleteIfExists(r.Table, r.Chain, r.Spec...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete rule %s %s %v: %w", r.Table, r.Chain, r.Spec, err))
			continue
		}
		klog.FromContext(ctx).Info("Removed a rule of an earlier pod CIDR", "table", r.Table, "chain", r.Chain, "rule", r.Spec)
	}
	return errors.Join(errs...)
}

// syncRoutes carries out the route plan; each route's failure is its own.
func syncRoutes(ctx context.Context, table RouteTable, want []Route) error {
	logger := klog.FromContext(ctx)
	have, err := table.List()
	if err != nil {
		return err
	}
	plan := planRoutes(want, have)
	var errs []error
	for _, r := range plan.replace {
		if err := table.Replace(r); err != nil {
			errs = append(errs, err)
			continue
		}
		logger.Info("Route to a node's pods in place", "podCIDR", r.Dst.String(), "via", r.Gw.String())
	}
	for _, r := range plan.remove {
		if err := table.Delete(r); err != nil {
			errs = append(errs, err)
			continue
		}
		logger.Info("Removed the route to pods of a node that is gone or changed", "podCIDR", r.Dst.String(), "via", r.Gw.String())
	}
	for _, r := range plan.conflicts {
		logger.V(2).Info("Not routing a node's pods: a route the agent did not make has that destination", "podCIDR", r.Dst.String(), "via", r.Gw.String())
	}
	return errors.Join(errs...)
}

// families lists the families of the CIDRs: false for IPv4, true for IPv6.
func families(cidrs []*net.IPNet) []bool {
	var out []bool
	for _, c := range cidrs {
		v6 := c.IP.To4() == nil
		if !slices.Contains(out, v6) {
			out = append(out, v6)
		}
	}
	return out
}

func stateEqual(a, b *state) bool {
	if a.Conflist != b.Conflist || a.Bridge != b.Bridge || a.IPAMDataDir != b.IPAMDataDir ||
		a.RouteProtocol != b.RouteProtocol || len(a.Rules) != len(b.Rules) {
		return false
	}
	for i := range a.Rules {
		if !a.Rules[i].equal(b.Rules[i]) {
			return false
		}
	}
	return true
}

func cidrStrings(cidrs []*net.IPNet) []string {
	out := make([]string, 0, len(cidrs))
	for _, c := range cidrs {
		out = append(out, c.String())
	}
	return out
}
