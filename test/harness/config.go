// Package harness brings up a local Kubernetes cluster made of the stock upstream parts
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd with runc and
// CNI, a local image registry) with a node agent as its node, and tears it down without a
// trace. Every end-to-end test of nodeagent runs on it.
//
// All of its state lives under one run directory; every process it starts has a pid file
// there, and everything it creates outside that directory (a veth pair, routes, a bridge,
// iptables rules made by CNI, pod cgroups) is named so that teardown finds it again, even
// after a crashed run.
package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Fixed shape of the harness's network. Every address here is reachable only from this
// machine: the node IP sits on one end of a veth pair whose other end has no address, and
// the service and cluster ranges are routed into that dead end so nothing leaves the host.
const (
	NodeName      = "nodeagent-node"
	NodeIP        = "10.254.254.1"
	lanPrefix     = 24 // the nodes' shared segment, 10.254.254.0/24
	ServiceCIDR   = "10.96.0.0/16"
	KubernetesSvc = "10.96.0.1"
	ClusterDNS    = "10.96.0.10"
	ClusterCIDR   = "10.244.0.0/16"
	PodCIDR       = "10.244.0.0/24" // the first block the node IPAM controller hands out
	ClusterDomain = "cluster.local"
	// Small container logs, so that rotation shows within a test; both agents get them.
	ContainerLogMaxSize  = "100Ki"
	ContainerLogMaxFiles = 3
	APIServerPort        = 6443
	RegistryAddr         = "127.0.0.1:5000" // anonymous pulls and pushes
	AuthRegistry         = "127.0.0.1:5001" // the same content behind htpasswd
	RegistryUser         = "nodeagent"
	RegistryPass         = "registry-secret"
	etcdClientURL        = "http://127.0.0.1:2379"
	etcdPeerURL          = "http://127.0.0.1:2380"
	etcdMetricsURL       = "http://127.0.0.1:2381"

	vethNode  = "na-node0" // carried NodeIP in runs before the nodes shared a bridge
	bridgeDev = "na-cni0"  // the pod bridge, made by the CNI bridge plugin
	cniNet    = "nodeagent-pods"
)

// Runtimes the harness can run.
const (
	// RuntimeContainerd is containerd v2, built from the module proxy (the default).
	RuntimeContainerd = "containerd"
	// RuntimeContainerdDebian is Debian's containerd 1.6, to show an older CRI runtime works.
	RuntimeContainerdDebian = "containerd-debian"
)

// Who makes the pod network (Config.PodNetwork).
const (
	PodNetworkHarness = "harness"
	PodNetworkAgent   = "agent"
)

// Agents the harness can run as the node.
const (
	AgentNodeagent = "nodeagent"
	AgentKubelet   = "kubelet"
	AgentNone      = "none"
)

// Config says where the harness keeps its state and what it runs.
type Config struct {
	// RepoDir is the root of the nodeagent repository; the pinned upstream version is read
	// from its go.mod. Default: found by walking up from the working directory.
	RepoDir string
	// RunDir holds all state of a running cluster: pids, logs, PKI, data. Default
	// /var/lib/nodeagent-harness (env NODEAGENT_RUN_DIR).
	RunDir string
	// CacheDir holds built upstream binaries keyed by version; it survives teardown.
	// Default $XDG_CACHE_HOME/nodeagent or ~/.cache/nodeagent (env NODEAGENT_CACHE_DIR).
	CacheDir string
	// Runtime is RuntimeContainerd (default) or RuntimeContainerdDebian (env NODEAGENT_RUNTIME).
	Runtime string
	// Agent is the node agent to run: AgentNodeagent (default), AgentKubelet or AgentNone
	// (env NODEAGENT_AGENT).
	Agent string
	// TLSBootstrap starts the node agent from a bootstrap token kubeconfig alone, with
	// rotateCertificates and serverTLSBootstrap on: the cluster gets the bootstrap token and
	// the RBAC bindings kubeadm makes, and the agent requests its own certificates (env
	// NODEAGENT_TLS_BOOTSTRAP=1).
	TLSBootstrap bool
	// CertDuration, when set, is the controller-manager's --cluster-signing-duration: how
	// long the certificates it issues live, short to see rotations in a test (env
	// NODEAGENT_CERT_DURATION, a Go duration such as 2m).
	CertDuration time.Duration
	// CSIHostpath deploys the project's hostpath CSI driver once the node is Ready, as
	// users deploy a CSI driver (deploy/csi-hostpath): its node plugin, external-provisioner
	// and external-attacher beside it, its CSIDriver and the default StorageClass
	// nodeagent-csi. The sidecars are built from the module proxy the first time. `harness
	// up` and the main e2e suite turn it on; other clusters (benchmarks, conformance, the
	// TLS suite) run without it unless NODEAGENT_CSI_HOSTPATH=1. Needs a node agent.
	CSIHostpath bool
	// NodeCount is how many nodes the cluster has (env NODES, default 1, at most MaxNodes):
	// the first in the machine's own namespaces, the others each in namespaces of its own
	// (see Node). Several nodes need AgentNodeagent: each node's agent makes its pod network
	// (--pod-network=bridge).
	NodeCount int
	// PodNetwork says who makes the nodes' pod network (env NODEAGENT_POD_NETWORK):
	// PodNetworkHarness writes each node's CNI configuration (a bridge on the node's pod
	// CIDR) and, with several nodes, the routes between them and the masquerade rule, as an
	// administrator would; PodNetworkAgent has nodeagent make its own (--pod-network=bridge).
	// Default: the agent's with several nodes of nodeagent, the harness's otherwise.
	PodNetwork string
	// Services runs kube-proxy (iptables mode) beside the node agent and deploys CoreDNS
	// (deploy/coredns) with the kube-dns Service at ClusterDNS, so that pods reach
	// ClusterIPs, NodePorts and the kubernetes Service, and resolve cluster names.
	// CoreDNS is built from the module proxy the first time. `harness up`, the main e2e
	// suite and the conformance runner turn it on; other clusters (benchmarks, the TLS
	// suite) run without it unless NODEAGENT_SERVICES=1. Needs a node agent.
	Services bool
	// VolumeSnapshots installs volume snapshots as the pinned release's addon has them
	// (cluster/addons/volumesnapshots): the VolumeSnapshot CRDs and the
	// volume-snapshot-controller StatefulSet in kube-system, whose metrics the CSI Mock
	// snapshot specs read. Its image, and csi-snapshotter's, are built from
	// external-snapshotter at the release the addon names (snapshots.go). The conformance
	// runner's csimock scope turns it on (env NODEAGENT_VOLUME_SNAPSHOTS=1 elsewhere).
	// Needs Services.
	VolumeSnapshots bool
	// Kubeadm makes the cluster as kubeadm users do (env NODEAGENT_KUBEADM=1): no control
	// plane of the harness's own; NodeCount nodes (default 3), each in namespaces of its
	// own, with nodeagent installed from manifests/ as the kubelet's systemd service (run
	// by the systemctl stand-in, test/cmd/systemctl). `kubeadm init` on the first makes the
	// control plane out of nodeagent's static pods; the second joins with `kubeadm join`
	// and a JoinConfiguration as an operator writes it, the others with kind's join
	// configuration. Each agent makes its pod network (--pod-network=bridge). See kubeadm.go.
	Kubeadm bool
	// AgentRootFS, when more than zero, puts the agent's root directory (AgentRootDir) on
	// an ext4 filesystem of that many bytes of its own, loop-mounted from a sparse file in
	// the run dir before the agent starts: the node's filesystem (nodefs) is then small
	// enough for a test to fill, and filling it leaves the machine's alone. Teardown
	// unmounts it with the rest of the run dir. One node, not with Kubeadm.
	AgentRootFS int64
	// RuntimeRootFS, when more than zero, puts the runtime's root directory (containerd's
	// content store and snapshots: the node's image filesystem) on an ext4 filesystem of
	// that many bytes of its own, as AgentRootFS the agent's: image garbage collection by
	// disk usage can then be driven by a test. One node, not with Kubeadm.
	RuntimeRootFS int64
	// AgentConfigExtra is KubeletConfiguration, as YAML fields without apiVersion and kind,
	// that every node's agent gets over the harness's own (AgentConfig) in a drop-in of its
	// --config-dir, as an administrator adds settings: eviction thresholds, periods. A test
	// that passes --config-dir to StartAgent itself replaces it. Not with Kubeadm.
	AgentConfigExtra string
	// MaxPods, when more than zero, is the agents' maxPods (the KubeletConfiguration's
	// field, both agents' default 110 when unset): the benchmark raises it to start more
	// pods at once. The node's pod CIDR (a /24) bounds it in practice: 253 pod addresses.
	MaxPods int
	// RuntimeMetricsAddr, when set, is where each node's containerd serves its Prometheus
	// metrics (its [metrics] address, host:port on the node's own loopback): the
	// benchmark counts the CRI calls an agent makes from its grpc_server_handled_total.
	RuntimeMetricsAddr string
	// BusyboxBinary is the static busybox put into the busybox and agnhost images. Default
	// DebianBusybox; the conformance runner sets the upstream build of EnsureBusybox, whose
	// sh behaves as the one in upstream's e2e images.
	BusyboxBinary string
	// Logf reports progress; default writes to stderr.
	Logf func(format string, args ...any)

	// record collects the steps' times and the builds for ReportBuilds; made by Complete.
	record *buildRecord
}

// Complete fills defaults from the environment and validates the result.
func (c *Config) Complete() error {
	if c.RepoDir == "" {
		dir, err := findRepoDir()
		if err != nil {
			return err
		}
		c.RepoDir = dir
	}
	if c.RunDir == "" {
		c.RunDir = envOr("NODEAGENT_RUN_DIR", "/var/lib/nodeagent-harness")
	}
	if c.CacheDir == "" {
		c.CacheDir = os.Getenv("NODEAGENT_CACHE_DIR")
	}
	if c.CacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("cache dir: %w", err)
		}
		c.CacheDir = filepath.Join(base, "nodeagent")
	}
	if c.Runtime == "" {
		c.Runtime = envOr("NODEAGENT_RUNTIME", RuntimeContainerd)
	}
	if c.Agent == "" {
		c.Agent = envOr("NODEAGENT_AGENT", AgentNodeagent)
	}
	if !c.TLSBootstrap {
		c.TLSBootstrap = os.Getenv("NODEAGENT_TLS_BOOTSTRAP") == "1"
	}
	if !c.CSIHostpath {
		c.CSIHostpath = os.Getenv("NODEAGENT_CSI_HOSTPATH") == "1"
	}
	if c.CSIHostpath && c.Agent == AgentNone {
		c.CSIHostpath = false // nowhere to run the driver
	}
	if !c.Services {
		c.Services = os.Getenv("NODEAGENT_SERVICES") == "1"
	}
	if c.Services && c.Agent == AgentNone {
		c.Services = false // no node to proxy for, nowhere to run CoreDNS
	}
	if !c.VolumeSnapshots {
		c.VolumeSnapshots = os.Getenv("NODEAGENT_VOLUME_SNAPSHOTS") == "1"
	}
	if c.VolumeSnapshots && !c.Services {
		return fmt.Errorf("volume snapshots: the snapshot controller reaches the apiserver through the kubernetes Service; turn on Services (NODEAGENT_SERVICES=1)")
	}
	if v := os.Getenv("NODEAGENT_CERT_DURATION"); c.CertDuration == 0 && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("NODEAGENT_CERT_DURATION=%q: want a positive Go duration such as 2m", v)
		}
		c.CertDuration = d
	}
	if !c.Kubeadm {
		c.Kubeadm = os.Getenv("NODEAGENT_KUBEADM") == "1"
	}
	if c.Kubeadm {
		if c.Agent != AgentNodeagent || c.TLSBootstrap || c.Runtime != RuntimeContainerd {
			return fmt.Errorf("kubeadm: the cluster runs nodeagent on containerd v2 (its nodes bootstrap as kubeadm has them)")
		}
		c.CSIHostpath, c.Services, c.VolumeSnapshots = false, false, false
		c.PodNetwork = PodNetworkAgent
	}
	if v := os.Getenv("NODES"); c.NodeCount == 0 && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("NODES=%q: want a number of nodes", v)
		}
		c.NodeCount = n
	}
	if c.NodeCount == 0 {
		c.NodeCount = 1
		if c.Kubeadm {
			c.NodeCount = 3
		}
	}
	if c.NodeCount < 1 || c.NodeCount > MaxNodes || (c.Kubeadm && (c.NodeCount < 2 || c.NodeCount > MaxNodes-1)) {
		return fmt.Errorf("%d nodes: want 1 to %d (2 to %d with kubeadm)", c.NodeCount, MaxNodes, MaxNodes-1)
	}
	if c.NodeCount > 1 && (c.Agent == AgentNone || c.TLSBootstrap || c.Runtime != RuntimeContainerd) {
		return fmt.Errorf("%d nodes: several nodes run a node agent on containerd v2, without TLS bootstrap, for now", c.NodeCount)
	}
	if c.PodNetwork == "" {
		c.PodNetwork = os.Getenv("NODEAGENT_POD_NETWORK")
	}
	if c.PodNetwork == "" {
		c.PodNetwork = PodNetworkHarness
		if c.NodeCount > 1 && c.Agent == AgentNodeagent {
			c.PodNetwork = PodNetworkAgent
		}
	}
	if c.PodNetwork != PodNetworkHarness && (c.PodNetwork != PodNetworkAgent || c.Agent != AgentNodeagent) {
		return fmt.Errorf("pod network %q: want %q, or %q with nodeagent", c.PodNetwork, PodNetworkHarness, PodNetworkAgent)
	}
	if c.AgentRootFS < 0 || (c.AgentRootFS > 0 && (c.Kubeadm || c.NodeCount > 1)) {
		return fmt.Errorf("agent root filesystem of %d bytes: want a size, on one node without kubeadm", c.AgentRootFS)
	}
	if c.RuntimeRootFS < 0 || (c.RuntimeRootFS > 0 && (c.Kubeadm || c.NodeCount > 1)) {
		return fmt.Errorf("runtime root filesystem of %d bytes: want a size, on one node without kubeadm", c.RuntimeRootFS)
	}
	if c.MaxPods < 0 {
		return fmt.Errorf("maxPods %d: want a number of pods, or 0 for the agents' default", c.MaxPods)
	}
	if c.AgentConfigExtra != "" && c.Kubeadm {
		return errors.New("extra agent configuration: kubeadm's nodes are configured by kubeadm")
	}
	if c.BusyboxBinary == "" {
		c.BusyboxBinary = DebianBusybox
	}
	if c.Logf == nil {
		c.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "harness: "+format+"\n", args...) }
	}
	if c.record == nil {
		c.record = &buildRecord{}
	}
	switch c.Runtime {
	case RuntimeContainerd, RuntimeContainerdDebian:
	default:
		return fmt.Errorf("runtime %q: want %q or %q", c.Runtime, RuntimeContainerd, RuntimeContainerdDebian)
	}
	switch c.Agent {
	case AgentNodeagent, AgentKubelet, AgentNone:
	default:
		return fmt.Errorf("agent %q: want %q, %q or %q", c.Agent, AgentNodeagent, AgentKubelet, AgentNone)
	}
	for _, d := range []string{c.RunDir, c.CacheDir, c.RepoDir} {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("%q: must be an absolute path", d)
		}
	}
	if c.RunDir == "/" || strings.Count(filepath.Clean(c.RunDir), "/") < 2 {
		return fmt.Errorf("run dir %q: too close to / to be wiped safely", c.RunDir)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func findRepoDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(data), "module github.com/nodeagent/nodeagent\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repo dir: no go.mod of github.com/nodeagent/nodeagent above the working directory")
		}
		dir = parent
	}
}

// Paths of the run directory. Keeping them in one place lets teardown and tests find
// everything the harness made.
func (c *Config) path(elem ...string) string {
	return filepath.Join(append([]string{c.RunDir}, elem...)...)
}

// Kubeconfig is the admin kubeconfig of the running cluster.
func (c *Config) Kubeconfig() string { return c.path("pki", "admin.conf") }

// CRIEndpoint is the runtime's CRI socket, as a kubelet flag takes it.
func (c *Config) CRIEndpoint() string { return "unix://" + c.criSocket() }

func (c *Config) criSocket() string { return c.path("containerd", "containerd.sock") }

// BinDir is where the upstream binaries of the pinned version live once built.
func (c *Config) BinDir(version string) string {
	return filepath.Join(c.CacheDir, "upstream-"+version, "bin")
}

// conformanceDir is the run dir's entry that keeps conformance results across runs.
const conformanceDir = "conformance"

// ConformanceDir holds the results of conformance runs; Up and Down leave it in place.
func (c *Config) ConformanceDir() string { return c.path(conformanceDir) }

// artefactsDir is the run dir's entry that keeps what tests leave for people to look at
// (screenshots, say) across runs, as the conformance results.
const artefactsDir = "artefacts"

// ArtefactsDir holds what tests leave for people to look at after the run; Up and Down
// leave it in place.
func (c *Config) ArtefactsDir() string { return c.path(artefactsDir) }

// LogDir holds one log file per process.
func (c *Config) LogDir() string { return c.path("logs") }
