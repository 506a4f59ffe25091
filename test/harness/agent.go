package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// AgentConfig is the KubeletConfiguration both agents get, so that nodeagent and the
// upstream kubelet run side by side on exactly the same settings.
func (c *Config) AgentConfig() string { return c.agentConfig(nodeAt(0)) }

// agentConfig is node n's KubeletConfiguration: the nodes differ only in their cgroup root.
// Image GC by disk usage is off (high threshold 100): the machine's disk is shared with
// everything else on it, and the tests' images must not vanish because it fills; the
// image GC test turns GC by age on for itself. maxPods is written only when Config.MaxPods
// sets it.
func (c *Config) agentConfig(n Node) string {
	rotate := "rotateCertificates: false\n"
	if c.TLSBootstrap {
		rotate = "rotateCertificates: true\nserverTLSBootstrap: true\n"
	}
	// The disk signals' hard eviction thresholds are off (0%, as kind sets them, and the
	// kubeadm nodes here): the agents' root dir and containerd's are on the machine's disk,
	// shared with the Go build caches and everything else, and a node that evicts its pods
	// and refuses new ones because that disk is 85 % full tests nothing of the agent. The
	// memory threshold stays the agents' default. Clusters with filesystems of their own
	// (the eviction test's) keep the defaults, and their tests set their own.
	eviction := ""
	if c.AgentRootFS == 0 && c.RuntimeRootFS == 0 {
		eviction = "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: \"0%\"\n  nodefs.inodesFree: \"0%\"\n  imagefs.available: \"0%\"\n  imagefs.inodesFree: \"0%\"\n"
	}
	maxPods := "" // the agents' default, 110
	if c.MaxPods > 0 {
		maxPods = fmt.Sprintf("maxPods: %d\n", c.MaxPods)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %s
cgroupDriver: cgroupfs
cgroupRoot: %s
clusterDNS: [%s]
clusterDomain: %s
staticPodPath: %s
resolvConf: /etc/resolv.conf
failSwapOn: false
failCgroupV1: false
imageGCHighThresholdPercent: 100
%s%s%scontainerLogMaxSize: %s
containerLogMaxFiles: %d
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
`, c.CRIEndpoint(), n.CgroupRoot(), ClusterDNS, ClusterDomain, c.StaticPodDir(), eviction, rotate, maxPods, ContainerLogMaxSize, ContainerLogMaxFiles, c.path("pki", "ca.crt"))
}

// StaticPodDir is the agents' staticPodPath: a manifest written there runs as a static
// pod, mirrored in the apiserver.
func (c *Config) StaticPodDir() string { return c.path("agent", "manifests") }

// AgentRootDir is the agents' --root-dir (the kubelet's /var/lib/kubelet): pods,
// plugins and plugins_registry live below it.
func (c *Config) AgentRootDir() string { return c.path("agent", "root") }

// AgentArgs are the command-line flags of the node agent, as a kubeadm systemd drop-in
// passes them.
func (c *Config) AgentArgs() []string { return c.agentArgs(nodeAt(0)) }

// agentArgs are node n's agent flags. The paths are the same on every node (each sees its
// own dirs there); with several nodes each agent makes its node's pod network itself.
func (c *Config) agentArgs(n Node) []string {
	kubeconfig := c.AgentKubeconfig()
	if n.Index > 0 {
		kubeconfig = c.path("pki", "kubelet-"+n.tag()+".conf")
	}
	args := []string{
		"--config=" + c.path("agent", "config.yaml"),
		"--kubeconfig=" + kubeconfig,
		"--container-runtime-endpoint=" + c.CRIEndpoint(),
		"--node-ip=" + n.IP,
		"--hostname-override=" + n.Name,
		"--root-dir=" + c.AgentRootDir(),
		"--cert-dir=" + c.AgentCertDir(),
		"--v=2",
	}
	if c.AgentConfigExtra != "" {
		args = append(args, "--config-dir="+c.agentConfigDir())
	}
	if c.PodNetwork == PodNetworkAgent {
		args = append(args, "--pod-network=bridge", "--cni-conf-dir="+c.path("cni", "net.d"),
			"--pod-network-bridge="+bridgeDev, "--cluster-cidr="+ClusterCIDR)
	}
	if c.TLSBootstrap {
		args = append(args, "--bootstrap-kubeconfig="+c.BootstrapKubeconfig())
	}
	return args
}

// AgentKubeconfig is the node agent's --kubeconfig; with TLSBootstrap the agent writes it.
func (c *Config) AgentKubeconfig() string { return c.path("pki", "kubelet.conf") }

// AgentCertDir is the node agent's --cert-dir, where bootstrapped certificates go.
func (c *Config) AgentCertDir() string { return c.path("agent", "pki") }

// AgentBuildTags are the build tags of the agent's binary, as the Makefile's
// AGENT_TAGS: grpcnotrace leaves out gRPC's golang.org/x/net/trace, whose
// html/template makes the linker keep every exported method of every type.
const AgentBuildTags = "grpcnotrace"

// AgentBinary builds nodeagent from the repository into the run dir.
// It says nothing unless the go tool compiles something: a cached build only links.
func (c *Config) AgentBinary(ctx context.Context) (string, error) {
	out := c.path("bin", "nodeagent")
	p := c.startQuietBuild("nodeagent", "nodeagent")
	err := runBuild(ctx, c.RepoDir, []string{"CGO_ENABLED=0"}, p, "go", "build", "-v", "-tags", AgentBuildTags, "-o", out, "./cmd/nodeagent")
	p.end(err)
	if err != nil {
		return "", err
	}
	return out, nil
}

func (c *Config) startAgent(ctx context.Context, upstreamBin string) error {
	return c.startNodeAgent(ctx, nodeAt(0), upstreamBin)
}

func (c *Config) startNodeAgent(ctx context.Context, n Node, upstreamBin string) error {
	var bin string
	switch c.Agent {
	case AgentNone:
		c.Logf("no node agent requested: the control plane and the runtime are up without a node")
		return nil
	case AgentKubelet:
		bin = filepath.Join(upstreamBin, "kubelet")
	default:
		var err error
		if bin, err = c.AgentBinary(ctx); err != nil {
			return err
		}
	}
	for _, d := range []string{"manifests", "root", "pki"} {
		if err := os.MkdirAll(c.nodePath(n, "agent", d), 0o755); err != nil {
			return err
		}
	}
	if c.AgentRootFS > 0 && n.Index == 0 {
		if err := c.mountAgentRootFS(ctx); err != nil {
			return err
		}
	}
	if err := writeFiles(c.nodePath(n, "agent"), map[string]string{"config.yaml": c.agentConfig(n)}); err != nil {
		return err
	}
	if c.AgentConfigExtra != "" {
		if err := writeFiles(c.nodePath(n, "agent", "config.d"), map[string]string{"90-harness-extra.conf": agentConfigDropin(c.AgentConfigExtra)}); err != nil {
			return err
		}
	}
	if c.TLSBootstrap {
		if err := c.setupTLSBootstrap(ctx); err != nil {
			return err
		}
	}
	if _, err := c.startNodeDaemon(n, "agent", bin, c.agentArgs(n), nil); err != nil {
		return err
	}
	if err := c.waitNodeReady(ctx, n); err != nil {
		return err
	}
	if c.TLSBootstrap {
		// What the cluster's admin does when a node joins: the controller-manager approves
		// client certificates only.
		return c.approveFirstServingCSR(ctx)
	}
	return nil
}

func (c *Config) waitNodeReady(ctx context.Context, n Node) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	// A restarted agent's Node is still Ready from its last run: only a Ready written
	// since this start counts (the apiserver keeps whole seconds). And Ready says
	// nothing of the node API: its port must answer too, except with TLS bootstrap,
	// where it waits for the serving certificate the harness approves after this.
	since := time.Now().Truncate(time.Second)
	return c.waitReady(ctx, n.daemon("agent"), 2*time.Minute, func(ctx context.Context) error {
		if err := nodeReadySince(ctx, cs, n.Name, since); err != nil {
			return err
		}
		if c.TLSBootstrap {
			return nil
		}
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", net.JoinHostPort(n.IP, strconv.Itoa(nodeAPIPort)))
		if err != nil {
			return fmt.Errorf("node API of %s: %w", n.Name, err)
		}
		return conn.Close()
	})
}

// nodeAPIPort is the node API's port (the KubeletConfiguration's default, which the
// harness keeps).
const nodeAPIPort = 10250

// nodeReady says why the Node named name is not Ready, or nil when it is.
func nodeReady(ctx context.Context, cs kubernetes.Interface, name string) error {
	return nodeReadySince(ctx, cs, name, time.Time{})
}

// nodeReadySince is nodeReady, with a Ready condition whose heartbeat is not before since.
func nodeReadySince(ctx context.Context, cs kubernetes.Interface, name string, since time.Time) error {
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && !cond.LastHeartbeatTime.Time.Before(since) {
			return nil
		}
	}
	return fmt.Errorf("node %s is not Ready yet (since %s)", name, since.Format(time.RFC3339))
}

// StopAgent stops the node agent (SIGTERM, as systemd does), leaving its pods running.
func (c *Config) StopAgent(ctx context.Context) error {
	return c.stopDaemon(ctx, "agent", 30*time.Second)
}

// StartAgent starts the node agent again with the harness's flags followed by extraArgs,
// and waits for its Node to be Ready.
func (c *Config) StartAgent(ctx context.Context, extraArgs ...string) error {
	if err := c.StartAgentNoWait(extraArgs...); err != nil {
		return err
	}
	return c.waitNodeReady(ctx, nodeAt(0))
}

// StartAgentNoWait starts the node agent again as StartAgent does, without waiting for its
// Node: for tests whose apiserver is away.
func (c *Config) StartAgentNoWait(extraArgs ...string) error {
	bin := c.path("bin", "nodeagent")
	if c.Agent == AgentKubelet {
		version, err := KubeVersion(c.RepoDir)
		if err != nil {
			return err
		}
		bin = filepath.Join(c.BinDir(version), "kubelet")
	}
	_, err := c.startDaemon("agent", bin, append(c.AgentArgs(), extraArgs...), nil)
	return err
}

// SwitchAgent replaces the running node agent with another kind (AgentNodeagent or
// AgentKubelet) on the same control plane and runtime: it stops the current one, removes
// every pod sandbox it left so the next agent starts from an empty runtime, and starts the
// new one, waiting for its Node to be Ready.
func (c *Config) SwitchAgent(ctx context.Context, agent string) error {
	if err := c.StopAgent(ctx); err != nil {
		return err
	}
	if err := c.removeAllPods(ctx); err != nil {
		return err
	}
	version, err := KubeVersion(c.RepoDir)
	if err != nil {
		return err
	}
	c.Agent = agent
	if agent == AgentKubelet {
		if _, err := c.EnsureKubelet(ctx); err != nil {
			return err
		}
	}
	return c.startAgent(ctx, c.BinDir(version))
}

// AgentPid returns the pid of the running node agent, or 0.
func (c *Config) AgentPid() int { return c.Pids()["agent"] }
