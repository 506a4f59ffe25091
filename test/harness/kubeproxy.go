package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// kube-proxy runs as a process beside the node agent, one per node, in iptables mode.
// Until the harness runs it as a static pod, each node's kube-proxy is a daemon of the
// harness (kube-proxy on the first node, node2-kube-proxy, … on the others) in the node's
// namespaces, its rules in the node's network namespace. The other nodes' rules go with
// their namespaces; the first node's are the machine's, which Down cleans up.
const (
	kubeProxyDaemon      = "kube-proxy"
	kubeProxyHealthzPort = 10256
	kubeProxyMetricsPort = 10249
)

// KubeProxyKubeconfig is kube-proxy's kubeconfig: a client certificate for the user
// system:kube-proxy, which the default RBAC binds to system:node-proxier.
func (c *Config) KubeProxyKubeconfig() string { return c.path("pki", "kube-proxy.conf") }

// kubeProxyConfig is the KubeProxyConfiguration of the kube-proxy of the node nodeName at
// nodeIP, reaching the apiserver through kubeconfig.
//
// It is made to leave the machine as it found it once its rules are cleaned up: kube-proxy
// writes no global sysctl or module parameter. conntrack.maxPerCore 0 leaves
// nf_conntrack_max alone and the zero timeouts leave conntrack's; NodePorts answer on the
// node IP alone, so that kube-proxy has no reason to set route_localnet for localhost
// NodePorts. Its health and metrics servers listen on the node IP, so that nodes sharing
// a network namespace do not collide.
func (c *Config) kubeProxyConfig(nodeName, nodeIP, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[3]s
hostnameOverride: %[1]s
bindAddress: %[2]s
healthzBindAddress: %[2]s:%[4]d
metricsBindAddress: %[2]s:%[5]d
clusterCIDR: %[6]s
detectLocalMode: ClusterCIDR
nodePortAddresses: [%[2]s/32]
%[7]s`, nodeName, nodeIP, kubeconfig, kubeProxyHealthzPort, kubeProxyMetricsPort, ClusterCIDR, kubeProxyNoSysctls)
}

// kubeProxyNoSysctls are the KubeProxyConfiguration settings that keep kube-proxy off the
// machine's global sysctls (kind's, for the same reason): iptables mode, no localhost
// NodePorts (no route_localnet), conntrack's limit and timeouts left as they are.
const kubeProxyNoSysctls = `mode: iptables
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`

// kubeProxyArgs is kube-proxy's command line with its configuration file at configPath.
func (c *Config) kubeProxyArgs(configPath string) []string {
	return []string{"--config=" + configPath, "--v=2"}
}

// kubeProxyHealthz is the health URL of the kube-proxy of the node at nodeIP: 200 once
// it has written the rules of the Services it was told of.
func kubeProxyHealthz(nodeIP string) string {
	return "http://" + net.JoinHostPort(nodeIP, strconv.Itoa(kubeProxyHealthzPort)) + "/healthz"
}

// KubeProxyConfigPath is where node n's kube-proxy reads its configuration, as the machine
// sees the file.
func (c *Config) KubeProxyConfigPath(n Node) string {
	return c.nodePath(n, "kube-proxy", "config.yaml")
}

// superviseBinary builds test/cmd/supervise into the run dir: it runs kube-proxy and starts
// it again when it exits, as the kubelet restarts its DaemonSet pod (kube-proxy exits when
// its Node is deleted, and expects that).
func (c *Config) superviseBinary(ctx context.Context) (string, error) {
	out := c.path("bin", "supervise")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := c.goCmd(ctx, c.RepoDir, []string{"CGO_ENABLED=0"}, "build", "-o", out, "./test/cmd/supervise"); err != nil {
		return "", err
	}
	return out, nil
}

// startKubeProxy starts node n's kube-proxy (from the upstream bin dir, kept running by
// supervise, in the node's namespaces) and waits until it serves: healthy, and the
// kubernetes Service in the KUBE-SERVICES chain of the node's network namespace.
func (c *Config) startKubeProxy(ctx context.Context, n Node, upstreamBin string) error {
	sup, err := c.superviseBinary(ctx)
	if err != nil {
		return err
	}
	cfgPath := c.KubeProxyConfigPath(n)
	if err := writeFiles(filepath.Dir(cfgPath), map[string]string{
		filepath.Base(cfgPath): c.kubeProxyConfig(n.Name, n.IP, c.KubeProxyKubeconfig()),
	}); err != nil {
		return err
	}
	args := append([]string{filepath.Join(upstreamBin, "kube-proxy")}, c.kubeProxyArgs(cfgPath)...)
	if _, err := c.startNodeDaemon(n, kubeProxyDaemon, sup, args, nil); err != nil {
		return err
	}
	return c.waitReady(ctx, n.daemon(kubeProxyDaemon), time.Minute, func(ctx context.Context) error {
		if err := httpExpect(ctx, http.DefaultClient, kubeProxyHealthz(n.IP), ""); err != nil {
			return err
		}
		var out string
		if err := InNetns(n.Netns(), func() (err error) {
			out, err = run(ctx, "iptables", "-t", "nat", "-S", "KUBE-SERVICES")
			return err
		}); err != nil {
			return err
		}
		if !strings.Contains(out, KubernetesSvc+"/32") {
			return fmt.Errorf("node %s: no rule for the kubernetes Service (%s) in KUBE-SERVICES yet", n.Name, KubernetesSvc)
		}
		return nil
	})
}

// cleanupKubeChains removes what a kube-proxy left in the kernel, from this run or a killed
// earlier one, and the chains of the upstream kubelet. `kube-proxy --cleanup` deletes its
// jumps from the built-in chains and the KUBE-* chains of its iptables and ipvs modes
// (KUBE-SERVICES, KUBE-NODEPORTS, KUBE-POSTROUTING, KUBE-MARK-MASQ, KUBE-FORWARD,
// KUBE-PROXY-FIREWALL, KUBE-EXTERNAL-SERVICES, KUBE-PROXY-CANARY, the per-Service
// KUBE-SVC-/KUBE-SEP-/… chains) in IPv4 and IPv6, and the kube-proxy tables of its
// nftables mode; nothing else. It leaves KUBE-FIREWALL, which kube-proxy makes as a copy
// of the kubelet's, so removeKubeletChains takes that and the upstream kubelet's own (the
// harness runs it for comparison; it removes none of them either). The cleanup runs only
// while no kube-proxy of the harness runs, and --cleanup only when kube-proxy's chains
// are there, so that Down on a machine that never ran one costs nothing.
func (c *Config) cleanupKubeChains(ctx context.Context) error {
	if c.Running(kubeProxyDaemon) {
		return errors.New("kube-proxy still runs: stop it before cleaning up its rules")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if proxyOwn(kubeChainsLeft(ctx)) {
		version, err := KubeVersion(c.RepoDir)
		if err != nil {
			return err
		}
		bin := filepath.Join(c.BinDir(version), "kube-proxy")
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("kube-proxy's rules are left but there is no kube-proxy to remove them (`go run ./test/cmd/harness build` builds it): %w", err)
		}
		if out, err := exec.CommandContext(ctx, bin, "--cleanup", "--v=2").CombinedOutput(); err != nil {
			return fmt.Errorf("kube-proxy --cleanup: %w\n%s", err, tail(out, 3000))
		}
	}
	removeKubeletChains(ctx)
	if left := kubeChainsLeft(ctx); len(left) > 0 {
		return fmt.Errorf("kube-proxy's cleanup left: %s", strings.Join(left, "; "))
	}
	return nil
}

// kubeletChains are the chains of the upstream kubelet, which kube-proxy's cleanup leaves,
// and the tables they are in. Only KUBE-FIREWALL has rules (its localnet rule) and jumps
// to it (from INPUT and OUTPUT).
var kubeletChains = map[string][]string{
	"KUBE-FIREWALL":       {"filter"},
	"KUBE-KUBELET-CANARY": {"nat", "filter", "mangle"},
	"KUBE-IPTABLES-HINT":  {"mangle"},
}

// localnetComment marks the one rule the kubelet and kube-proxy put in KUBE-FIREWALL.
const localnetComment = "block incoming localnet connections"

// proxyOwn says whether left names a chain of kube-proxy's own, not the kubelet's.
func proxyOwn(left []string) bool {
	for _, l := range left {
		if _, kubelet := kubeletChains[l[strings.LastIndex(l, " ")+1:]]; !kubelet {
			return true
		}
	}
	return false
}

// removeKubeletChains deletes the kubelet's chains in both families: the jumps to
// KUBE-FIREWALL and its localnet rule, then each chain, which the kernel refuses while a
// rule of someone else is still in it or jumps to it. Errors are for the final check.
func removeKubeletChains(ctx context.Context) {
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(cmd + "-save"); err != nil {
			continue
		}
		text, err := run(ctx, cmd+"-save", "-t", "filter")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(text, "\n") {
			if !strings.HasPrefix(line, "-A ") {
				continue
			}
			fields := splitRule(line)
			jump := (fields[1] == "INPUT" || fields[1] == "OUTPUT") && strings.HasSuffix(line, " -j KUBE-FIREWALL")
			localnet := fields[1] == "KUBE-FIREWALL" && strings.Contains(line, localnetComment)
			if jump || localnet {
				_, _ = run(ctx, cmd, append([]string{"-t", "filter", "-D"}, fields[1:]...)...)
			}
		}
		for chain, tables := range kubeletChains {
			for _, table := range tables {
				if _, err := run(ctx, cmd, "-t", table, "-S", chain); err == nil {
					_, _ = run(ctx, cmd, "-t", table, "-X", chain)
				}
			}
		}
	}
}

// kubeChainsLeft lists the KUBE-* chains in the tables kube-proxy and the kubelet write, in
// both families, and kube-proxy's nftables tables, as "<command> <table>: <chain>".
func kubeChainsLeft(ctx context.Context) []string {
	var out []string
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(save); err != nil {
			continue
		}
		for _, table := range []string{"nat", "filter", "mangle"} {
			text, err := run(ctx, save, "-t", table)
			if err != nil {
				continue
			}
			for _, chain := range kubeChains(text) {
				out = append(out, save+" "+table+": "+chain)
			}
		}
	}
	if _, err := exec.LookPath("nft"); err == nil {
		for _, family := range []string{"ip", "ip6"} {
			if _, err := run(ctx, "nft", "list", "table", family, "kube-proxy"); err == nil {
				out = append(out, "nft "+family+": kube-proxy")
			}
		}
	}
	return out
}

// kubeChains returns the KUBE-* chains declared in iptables-save output.
func kubeChains(save string) []string {
	var out []string
	for _, line := range strings.Split(save, "\n") {
		name, ok := strings.CutPrefix(line, ":")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, " ")
		if strings.HasPrefix(name, "KUBE-") {
			out = append(out, name)
		}
	}
	return out
}
