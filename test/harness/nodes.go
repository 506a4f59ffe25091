package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node is one node of the harness's cluster. The first (Index 0) lives in the machine's
// own namespaces, as the harness's single node always did; every other node lives in
// namespaces of its own (network, mount, PID, UTS), made by a nodeinit process as its
// PID 1: a node in every sense a kind node is, without a container engine. Each runs its
// own containerd and node agent; they share the control plane, the registry and one L2
// segment (the bridge lanBridge in the switch's namespace lanNetns), with host-gw routes
// between their pod CIDRs.
type Node struct {
	Index int
	Name  string // the Node object's name (--hostname-override)
	IP    string // InternalIP, on the shared segment
}

// MaxNodes is the most nodes the harness brings up (addresses and pod CIDRs are per index).
const MaxNodes = 8

const (
	// The nodes' shared segment is a bridge in a network namespace of its own (the switch,
	// as Docker's bridge is to kind's nodes): a bridge in the machine's namespace would
	// run the first node's kube-proxy rules on frames bridged between other nodes
	// (br_netfilter), and a NodePort of the first node reached from another node and
	// forwarded back to it would be bridged past the masquerade and lost.
	lanNetns  = "na-lan"     // the switch's network namespace
	lanBridge = "lan"        // the bridge in it
	lanLink   = "na-lan"     // the machine's link onto the segment: carries NodeIP
	lanPort   = "machine"    // lanLink's peer, a port of the bridge
	lanDead   = "na-dead0"   // older runs' dead bridge port (teardown only)
	netnsDir  = "/run/netns" // where `ip netns` looks; the harness's entries are na-<tag>
)

// nodeAt returns the node of index i: nodeagent-node, then nodeagent-node2, -node3, …
func nodeAt(i int) Node {
	n := Node{Index: i, Name: NodeName, IP: NodeIP}
	if i > 0 {
		n.Name = fmt.Sprintf("%s%d", NodeName, i+1)
		n.IP = fmt.Sprintf("10.254.254.%d", i+1)
	}
	return n
}

// Nodes lists the cluster's nodes, the first one first. A kubeadm cluster has none in the
// machine's own namespaces: its nodes start at the second index (nodeagent-node2).
func (c *Config) Nodes() []Node {
	first := 0
	if c.Kubeadm {
		first = 1
	}
	out := make([]Node, 0, c.NodeCount)
	for i := range c.NodeCount {
		out = append(out, nodeAt(first+i))
	}
	return out
}

// tag names the node's daemons, directories and network namespace: node2, node3, …
func (n Node) tag() string { return fmt.Sprintf("node%d", n.Index+1) }

// daemon is the harness's name of one of the node's processes: the first node's keep their
// plain names (agent, containerd), the others' carry the node's tag (node2-agent).
func (n Node) daemon(name string) string {
	if n.Index == 0 {
		return name
	}
	return n.tag() + "-" + name
}

// Netns is the node's network namespace as `ip netns` names it; "" for the first node,
// which is in the machine's.
func (n Node) Netns() string {
	if n.Index == 0 {
		return ""
	}
	return "na-" + n.tag()
}

// CgroupRoot is the node agent's cgroupRoot on this node.
func (n Node) CgroupRoot() string {
	if n.Index == 0 {
		return CgroupRoot
	}
	return CgroupRoot + "-" + n.tag()
}

// PodCIDR is the block the node IPAM controller hands the node, nodes registering in order.
func (n Node) PodCIDR() string { return fmt.Sprintf("10.244.%d.0/24", n.Index) }

// nodeOwnDirs are the run dir's entries each node has its own of: a node sees its own at
// the first node's path, so paths in configs are the same on every node.
var nodeOwnDirs = []string{"agent", "containerd", "cni"}

// podLogsDir is the agents' podLogsDirectory (the kubelet's default), which every node
// beyond the first has its own of.
const podLogsDir = "/var/log/pods"

// nodePath is where a file of the node's own dirs is, seen from the machine.
func (c *Config) nodePath(n Node, elem ...string) string {
	if n.Index == 0 {
		return c.path(elem...)
	}
	return c.path(append([]string{"nodes", n.tag()}, elem...)...)
}

// nodeinit is the PID 1 of the other nodes, built from the repository into the run dir.
func (c *Config) nodeinitBinary(ctx context.Context) (string, error) {
	out := c.path("bin", "nodeinit")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := c.goCmd(ctx, c.RepoDir, []string{"CGO_ENABLED=0"}, "build", "-o", out, "./test/cmd/nodeinit"); err != nil {
		return "", err
	}
	return out, nil
}

func (c *Config) initSocket(n Node) string { return c.path("nodes", n.tag(), "init.sock") }

// startNode makes node n's namespaces: it starts nodeinit in new ones, names its network
// namespace for `ip netns`, and wires it to the shared segment.
// Each of binds puts a dir of the machine (the node's own, made if missing) over a path
// of the node's view.
func (c *Config) startNode(ctx context.Context, n Node, binds ...[2]string) error {
	bin, err := c.nodeinitBinary(ctx)
	if err != nil {
		return err
	}
	args := []string{"--hostname=" + n.Name, "--socket=" + c.initSocket(n), "--detach=" + c.RunDir}
	// Every node has its own pod log directory, as a machine of its own would: an agent
	// removes the log directories of pods it does not run (the kubelet does, of every pod
	// it does not know), which would take the other nodes' logs.
	if err := c.makeMountpoint(podLogsDir); err != nil {
		return err
	}
	binds = append(binds, [2]string{c.path("nodes", n.tag(), "var-log-pods"), podLogsDir})
	for _, b := range binds {
		if err := os.MkdirAll(b[0], 0o755); err != nil {
			return err
		}
		args = append(args, "--bind="+b[0]+":"+b[1])
	}
	for _, d := range nodeOwnDirs {
		own := c.nodePath(n, d)
		if err := os.MkdirAll(own, 0o755); err != nil {
			return err
		}
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return err
		}
		args = append(args, "--bind="+own+":"+c.path(d))
	}
	attr := &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS}
	pid, err := c.startDaemonAttr(n.daemon("init"), bin, args, nil, attr)
	if err != nil {
		return err
	}
	if err := c.waitReady(ctx, n.daemon("init"), 30*time.Second, func(ctx context.Context) error {
		conn, err := net.Dial("unix", c.initSocket(n))
		if err == nil {
			conn.Close()
		}
		return err
	}); err != nil {
		return err
	}
	if err := nameNetns(n.Netns(), pid); err != nil {
		return err
	}
	host := "na-veth" + strconv.Itoa(n.Index+1)
	ns := n.Netns()
	steps := [][]string{
		{"ip", "-n", lanNetns, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "-n", lanNetns, "link", "set", host, "master", lanBridge, "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", n.IP + "/24", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		// The node's dead ends, as the first node's: service and cluster addresses that no
		// rule or route claims die on the segment instead of leaving the machine.
		{"ip", "-n", ns, "route", "replace", ServiceCIDR, "dev", "eth0"},
		{"ip", "-n", ns, "route", "replace", ClusterCIDR, "dev", "eth0"},
	}
	for _, s := range steps {
		if _, err := run(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return InNetns(ns, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	})
}

// startWholeNode brings up node n beyond the first: its namespaces, its runtime and its
// agent, and waits for its Node to be Ready.
func (c *Config) startWholeNode(ctx context.Context, n Node, upstreamBin string) error {
	if err := c.startNode(ctx, n); err != nil {
		return err
	}
	if err := c.startNodeContainerd(ctx, n); err != nil {
		return err
	}
	return c.startNodeAgent(ctx, n, upstreamBin)
}

// nameNetns binds the network namespace of pid at /run/netns/<name>, as `ip netns add` does.
func nameNetns(name string, pid int) error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(netnsDir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	if err := unix.Mount(fmt.Sprintf("/proc/%d/ns/net", pid), path, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("name the netns of pid %d %s: %w", pid, name, err)
	}
	return nil
}

// InNetns runs fn on a thread in the named network namespace (under /run/netns): sockets it
// opens and /proc/sys/net it reads are the node's.
func InNetns(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	target, err := os.Open(filepath.Join(netnsDir, name))
	if err != nil {
		return err
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked: it ends with this goroutine, taking the namespace
		// with it, so no other goroutine ever runs there.
		runtime.LockOSThread()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// nodeinitRequest and nodeinitReply are nodeinit's protocol (test/cmd/nodeinit).
type nodeinitRequest struct {
	Bin      string   `json:"bin"`
	Args     []string `json:"args"`
	Env      []string `json:"env"`
	Log      string   `json:"log"`
	ExitFile string   `json:"exitFile"`
}

type nodeinitReply struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

// startNodeDaemon starts one of node n's processes in its namespaces and records its pid
// (as the machine sees it) as startDaemon does; on the first node it is startDaemon.
func (c *Config) startNodeDaemon(n Node, name, bin string, args, env []string) (int, error) {
	if n.Index == 0 {
		return c.startDaemon(name, bin, args, env)
	}
	name = n.daemon(name)
	for _, d := range []string{c.pidDir(), c.LogDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
	}
	initRec, err := c.readPid(n.daemon("init"))
	if err != nil || !initRec.alive() {
		return 0, fmt.Errorf("start %s: node %s is not running", name, n.Name)
	}
	conn, err := net.Dial("unix", c.initSocket(n))
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", name, err)
	}
	defer conn.Close()
	req := nodeinitRequest{Bin: bin, Args: args, Env: env,
		Log: filepath.Join(c.LogDir(), name+".log"), ExitFile: filepath.Join(c.pidDir(), name+".exit")}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return 0, fmt.Errorf("start %s: %w", name, err)
	}
	var reply nodeinitReply
	if err := json.NewDecoder(conn).Decode(&reply); err != nil {
		return 0, fmt.Errorf("start %s: %w", name, err)
	}
	if reply.Error != "" {
		return 0, fmt.Errorf("start %s: %s", name, reply.Error)
	}
	pid := hostPid(initRec.Pid, reply.Pid)
	if pid == 0 {
		return 0, fmt.Errorf("start %s: pid %d of node %s not found (it exited at once?)\n%s", name, reply.Pid, n.Name, c.logTail(name))
	}
	rec := pidRecord{Pid: pid, Exe: bin, Start: procStart(pid)}
	data, _ := json.Marshal(rec)
	return pid, os.WriteFile(filepath.Join(c.pidDir(), name+".pid"), data, 0o644)
}

// hostPid finds, among the children of parent, the process whose pid in its own (the
// node's) PID namespace is nsPid.
func hostPid(parent, nsPid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		var ppid int
		var nspids []string
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			} else if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				nspids = strings.Fields(v)
			}
		}
		if ppid == parent && len(nspids) > 1 && nspids[len(nspids)-1] == strconv.Itoa(nsPid) {
			return pid
		}
	}
	return 0
}

// extraNodesOnDisk lists the nodes beyond the first that the run dir has state of, whatever
// NodeCount is now: teardown finds every node an earlier run made.
func (c *Config) extraNodesOnDisk() []Node {
	entries, _ := os.ReadDir(c.path("nodes"))
	var out []Node
	for _, e := range entries {
		i, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node"))
		if err != nil || !strings.HasPrefix(e.Name(), "node") || i < 2 || i > MaxNodes {
			continue
		}
		out = append(out, nodeAt(i-1))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out
}

// stopNodes stops every other node: its agent first, then its pods through its runtime,
// then its init, which takes every process of the node with it; then the names and links
// the harness gave it.
func (c *Config) stopNodes(ctx context.Context) error {
	var errs []error
	nodes := c.extraNodesOnDisk()
	for _, n := range nodes {
		errs = append(errs, c.stopNodeUnits(ctx, n)) // a kubeadm node's agent
		errs = append(errs, c.stopDaemon(ctx, n.daemon("agent"), 30*time.Second))
	}
	for _, n := range nodes {
		if c.Running(n.daemon("containerd")) {
			errs = append(errs, c.removeNodePods(ctx, n))
		}
	}
	for _, n := range nodes {
		// nodeinit stops the node's daemons on SIGTERM; SIGKILL after the grace ends the
		// PID namespace and all in it.
		errs = append(errs, c.stopDaemon(ctx, n.daemon("init"), 30*time.Second))
		for _, d := range []string{"containerd", "agent", "kube-proxy"} {
			_ = os.Remove(filepath.Join(c.pidDir(), n.daemon(d)+".pid"))
		}
	}
	errs = append(errs, removeNetnsNames())
	return errors.Join(errs...)
}

// removeNetnsNames unmounts and removes the harness's entries of /run/netns.
func removeNetnsNames() error {
	entries, _ := os.ReadDir(netnsDir)
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "na-node") {
			continue
		}
		p := filepath.Join(netnsDir, e.Name())
		_ = unix.Unmount(p, unix.MNT_DETACH)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// NodeCRIEndpoint is node n's CRI socket as the machine sees it.
func (c *Config) NodeCRIEndpoint(n Node) string {
	return "unix://" + c.nodePath(n, "containerd", "containerd.sock")
}

// StopNodeAgent stops node n's agent (SIGTERM), leaving its pods running.
func (c *Config) StopNodeAgent(ctx context.Context, n Node) error {
	return c.stopDaemon(ctx, n.daemon("agent"), 30*time.Second)
}

// harnessRoutes makes what connects the nodes' pod networks when the harness makes them:
// on every node a route to each other node's pod CIDR via that node's IP (host-gw), and a
// rule that masquerades only what leaves the cluster CIDR. The pod CIDRs the harness wrote
// must be the ones the controller-manager handed out.
func (c *Config) harnessRoutes(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	nodes := c.Nodes()
	for _, n := range nodes {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if node.Spec.PodCIDR != n.PodCIDR() {
			return fmt.Errorf("node %s has the pod CIDR %q, but the harness configured %s", n.Name, node.Spec.PodCIDR, n.PodCIDR())
		}
	}
	for _, n := range nodes {
		ip := []string{"ip"}
		ipt := []string{"iptables"}
		if ns := n.Netns(); ns != "" {
			ip = append(ip, "-n", ns)
			ipt = append([]string{"ip", "netns", "exec", ns}, ipt...)
		}
		for _, o := range nodes {
			if o.Index != n.Index {
				if _, err := run(ctx, ip[0], append(ip[1:], "route", "replace", o.PodCIDR(), "via", o.IP)...); err != nil {
					return err
				}
			}
		}
		rule := []string{"POSTROUTING", "-s", n.PodCIDR(), "!", "-d", ClusterCIDR,
			"-m", "comment", "--comment", cniNet + ": masquerade what leaves the cluster", "-j", "MASQUERADE"}
		check := append(append([]string{}, ipt[1:]...), append([]string{"-t", "nat", "-C"}, rule...)...)
		if _, err := run(ctx, ipt[0], check...); err == nil {
			continue
		}
		add := append(append([]string{}, ipt[1:]...), append([]string{"-t", "nat", "-A"}, rule...)...)
		if _, err := run(ctx, ipt[0], add...); err != nil {
			return err
		}
	}
	return nil
}
