package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// A kubeadm cluster (Config.Kubeadm) is made the way kubeadm's users make one, on nodes
// that are namespace bundles as kind's nodes are containers: on each node, nodeagent is
// installed as the kubelet's systemd service from manifests/ (unit and kubeadm drop-in,
// unchanged), /usr/local/bin holds nodeagent, a `kubelet` link to it, kubeadm, kubectl
// and the systemctl stand-in (test/cmd/systemctl: this machine's PID 1 is not systemd),
// and kubeadm's fixed paths (/etc/kubernetes, /var/lib/kubelet, /var/lib/etcd) are the
// node's own. `kubeadm init` runs on the first node, whose control plane then is
// nodeagent's static pods from images of the pinned release's binaries; the second node
// joins with `kubeadm join` and a JoinConfiguration as an operator writes it (preflight
// on), every further one with kind's join configuration (its well-known token, the CA
// unverified, preflight skipped).

// lanCIDR is the nodes' segment, where a kubeadm cluster's NodePorts answer.
var lanCIDR = fmt.Sprintf("10.254.254.0/%d", lanPrefix)

// KubeadmToken is the bootstrap token the cluster is made with: kind's well-known one.
const KubeadmToken = "abcdef.0123456789abcdef"

// kubeadmPaths are kubeadm's fixed paths on a node, each bound from the node's own dir
// of the same name under the run dir (nodes/<tag>/<name>).
// /lib/modules, absent on this machine, is mounted read-only into kube-proxy's pods.
var kubeadmPaths = map[string]string{
	"etc-kubernetes":  "/etc/kubernetes",
	"var-lib-kubelet": "/var/lib/kubelet",
	"var-lib-etcd":    "/var/lib/etcd",
	"lib-modules":     "/lib/modules",
}

// kubeadmBinDir is the node's /usr/local/bin, the same for every node.
func (c *Config) kubeadmBinDir() string { return c.path("kubeadm", "bin") }

// mountpointsFile records the mount points the harness made on the machine for the nodes'
// binds (kubeadm's fixed paths, absent on this machine), so that teardown removes them.
func (c *Config) mountpointsFile() string { return c.path("kubeadm-mountpoints") }

// KubeadmControlPlane is the node kubeadm init runs on.
func (c *Config) KubeadmControlPlane() Node { return c.Nodes()[0] }

// KubeadmNodeDir is where node n's own copy of one of kubeadm's fixed paths (say
// /var/lib/kubelet) is, seen from the machine.
func (c *Config) KubeadmNodeDir(n Node, path string) string {
	for name, p := range kubeadmPaths {
		if p == path {
			return c.path("nodes", n.tag(), name)
		}
	}
	return ""
}

// UnitStateDir is where the systemctl stand-in keeps node n's services' pid files and logs.
func (c *Config) UnitStateDir(n Node) string { return c.path("nodes", n.tag(), "systemctl") }

// unitDir holds node n's unit files, installed from manifests/.
func (c *Config) unitDir(n Node) string { return c.path("nodes", n.tag(), "systemd") }

// kubeadmSteps are the steps of Up for a kubeadm cluster, after the machine's own ones
// (packages, the nodes' segment, cgroup roots) and the upstream build.
func (c *Config) kubeadmSteps(bin string) []upStep {
	steps := []upStep{
		{"registries", c.startRegistries},
		{"images pushed", func(ctx context.Context) error { return c.pushImages(ctx, bin) }},
		{"control-plane images", func(ctx context.Context) error { return c.pushControlPlaneImages(ctx, bin) }},
		{"node files", func(ctx context.Context) error { return c.installNodeFiles(ctx, bin) }},
	}
	for _, n := range c.Nodes() {
		steps = append(steps, upStep{"node " + n.Name, func(ctx context.Context) error { return c.startKubeadmNode(ctx, n) }})
	}
	steps = append(steps, upStep{"kubeadm init", c.kubeadmInit})
	for _, n := range c.Nodes()[1:] {
		steps = append(steps, upStep{"kubeadm join " + n.Name, func(ctx context.Context) error { return c.kubeadmJoin(ctx, n, c.kindNode(n)) }})
	}
	return append(steps, upStep{"nodes Ready", func(ctx context.Context) error {
		for _, n := range c.Nodes() {
			if err := c.waitKubeadmNodeReady(ctx, n); err != nil {
				return err
			}
		}
		return nil
	}})
}

// waitKubeadmNodeReady waits for node n's Node to be Ready while the node runs; a failure
// carries the end of the agent's log (the stand-in keeps it).
func (c *Config) waitKubeadmNodeReady(ctx context.Context, n Node) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	err = c.waitReady(ctx, n.daemon("init"), 3*time.Minute, func(ctx context.Context) error {
		return nodeReady(ctx, cs, n.Name)
	})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.UnitStateDir(n), "kubelet.service.log"))
		return fmt.Errorf("%w\n---- end of %s's agent log:\n%s", err, n.Name, tail(log, 3000))
	}
	return nil
}

type upStep struct {
	name string
	do   func(context.Context) error
}

// pushControlPlaneImages pushes the images kubeadm asks for (`kubeadm config images
// list`): each one layer holding the binary of the pinned release that the image is
// named after, on PATH, as upstream's images are distroless ones of the same binary. The
// pause image is the harness's own, pushed with the base images.
func (c *Config) pushControlPlaneImages(ctx context.Context, bin string) error {
	cfg, err := c.writeKubeadmConfig(c.KubeadmControlPlane(), "init.yaml", c.kubeadmInitConfig())
	if err != nil {
		return err
	}
	out, err := run(ctx, filepath.Join(bin, "kubeadm"), "config", "images", "list", "--config", cfg)
	if err != nil {
		return err
	}
	for _, ref := range strings.Fields(out) {
		path, ok := strings.CutPrefix(ref, "registry.k8s.io/")
		if !ok {
			return fmt.Errorf("kubeadm wants image %s, not of registry.k8s.io", ref)
		}
		binary, _, _ := strings.Cut(path, ":")
		if binary == "pause" {
			if ref != PauseImage {
				return fmt.Errorf("kubeadm wants %s, the harness has %s", ref, PauseImage)
			}
			continue
		}
		layer, err := c.controlPlaneLayer(ctx, bin, binary)
		if err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		img, err := imageOf(v1.Config{Entrypoint: []string{"/usr/local/bin/" + binary}, Env: []string{imagePath}}, layer)
		if err != nil {
			return err
		}
		if err := pushImage(ctx, RegistryAddr+"/"+path, img); err != nil {
			return err
		}
	}
	return nil
}

// controlPlaneLayer holds binary at /usr/local/bin, and /tmp. kube-proxy's has this
// machine's iptables too (nf_tables, as upstream's image picks where the host uses it).
func (c *Config) controlPlaneLayer(ctx context.Context, bin, binary string) (v1.Layer, error) {
	data, err := os.ReadFile(filepath.Join(bin, binary))
	if err != nil {
		return nil, err
	}
	files := []tarFile{{name: "usr/local/bin/" + binary, mode: 0o755, data: data}}
	if binary == "kube-proxy" {
		// iptables loads its matches and targets as plugins, which ldd does not list.
		plugins, _ := filepath.Glob("/usr/lib/*/xtables/*.so")
		if len(plugins) == 0 {
			return nil, fmt.Errorf("no iptables plugins (/usr/lib/*/xtables/*.so) on this machine")
		}
		want := map[string]string{"usr/sbin/xtables-nft-multi": "/usr/sbin/xtables-nft-multi"}
		for _, p := range plugins {
			want[strings.TrimPrefix(p, "/")] = p
		}
		tools, err := hostToolFiles(ctx, want)
		if err != nil {
			return nil, err
		}
		for _, f := range tools {
			if !f.dir {
				files = append(files, f)
			}
		}
		for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
			files = append(files, tarFile{name: "usr/sbin/" + name, linkname: "xtables-nft-multi"})
		}
		protocols, err := os.ReadFile("/etc/protocols")
		if err != nil {
			return nil, err
		}
		files = append(files, tarFile{name: "etc/protocols", mode: 0o644, data: protocols})
	}
	tmp := tarFile{name: "tmp", mode: 0o1777, dir: true}
	return c.layerOf(append(append([]tarFile{tmp}, parentDirs(files)...), files...))
}

// installNodeFiles makes what an operator installs on each node: the binaries in
// /usr/local/bin (links into the run dir and the cache, the same for every node) and the
// units of manifests/.
func (c *Config) installNodeFiles(ctx context.Context, bin string) error {
	agent, err := c.AgentBinary(ctx)
	if err != nil {
		return err
	}
	systemctl := c.path("bin", "systemctl")
	p := c.startQuietBuild("systemctl stand-in", "systemctl")
	err = runBuild(ctx, c.RepoDir, []string{"CGO_ENABLED=0"}, p, "go", "build", "-v", "-o", systemctl, "./test/cmd/systemctl")
	p.end(err)
	if err != nil {
		return err
	}
	dir := c.kubeadmBinDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	links := map[string]string{
		"nodeagent": agent, "kubelet": "nodeagent", "systemctl": systemctl,
		"kubeadm": filepath.Join(bin, "kubeadm"), "kubectl": filepath.Join(bin, "kubectl"),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	unit, err := os.ReadFile(filepath.Join(c.RepoDir, "manifests", "kubelet.service"))
	if err != nil {
		return err
	}
	dropIn, err := os.ReadFile(filepath.Join(c.RepoDir, "manifests", "kubelet.service.d", "10-kubeadm.conf"))
	if err != nil {
		return err
	}
	for _, n := range c.Nodes() {
		if err := writeFiles(c.unitDir(n), map[string]string{"kubelet.service": string(unit)}); err != nil {
			return err
		}
		if err := writeFiles(filepath.Join(c.unitDir(n), "kubelet.service.d"), map[string]string{"10-kubeadm.conf": string(dropIn)}); err != nil {
			return err
		}
		// A kubeadm patch: each node's cgroup root is its own (kind's nodes have a cgroup
		// namespace each; these share the machine's hierarchies).
		patch := fmt.Sprintf("cgroupRoot: %s\n", n.CgroupRoot())
		if c.kindNode(n) {
			// kind's kubelet settings (its kubeadm config template) for its nodes.
			patch += "imageGCHighThresholdPercent: 100\nevictionHard:\n  nodefs.available: \"0%\"\n  nodefs.inodesFree: \"0%\"\n  imagefs.available: \"0%\"\n"
		}
		if err := writeFiles(c.kubeadmPatchDir(n), map[string]string{"kubeletconfiguration+merge.yaml": patch}); err != nil {
			return err
		}
	}
	return nil
}

// kindNode says whether node n joins as kind's nodes do: the workers after the first.
func (c *Config) kindNode(n Node) bool { return n.Index > c.Nodes()[1].Index }

func (c *Config) kubeadmPatchDir(n Node) string { return c.path("nodes", n.tag(), "patches") }

// startKubeadmNode starts node n's namespaces with kubeadm's paths and /usr/local/bin its
// own, and its containerd. The agent is kubeadm's to start.
func (c *Config) startKubeadmNode(ctx context.Context, n Node) error {
	binds := [][2]string{{c.kubeadmBinDir(), "/usr/local/bin"}}
	for name, path := range kubeadmPaths {
		if err := c.makeMountpoint(path); err != nil {
			return err
		}
		binds = append(binds, [2]string{c.path("nodes", n.tag(), name), path})
	}
	if err := c.startNode(ctx, n, binds...); err != nil {
		return err
	}
	if err := c.startNodeContainerd(ctx, n); err != nil {
		return err
	}
	// What the operator does after installing the units (kubeadm's preflight warns otherwise).
	cmd, err := c.NodeCommand(ctx, n, "systemctl", "enable", "kubelet")
	if err != nil {
		return err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("systemctl enable kubelet on %s: %w: %s", n.Name, err, out)
	}
	return nil
}

// makeMountpoint makes dir on the machine if it is missing, and records it for teardown.
func (c *Config) makeMountpoint(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(c.mountpointsFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, dir)
	return err
}

// removeMountpoints removes the mount points makeMountpoint made, if they are empty.
func (c *Config) removeMountpoints() error {
	data, err := os.ReadFile(c.mountpointsFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var errs []error
	for _, dir := range strings.Fields(string(data)) {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("mount point %s: %w", dir, err))
		}
	}
	if len(errs) == 0 {
		return os.Remove(c.mountpointsFile())
	}
	return errors.Join(errs...)
}

// criSocketURL is containerd's socket, at the same path on every node.
func (c *Config) criSocketURL() string { return "unix://" + c.criSocket() }

// kubeletExtraArgs are the flags every node's agent gets through kubeadm's
// kubeletExtraArgs: its address on the nodes' segment, and its own pod network.
func (c *Config) kubeletExtraArgs(n Node) string {
	args := [][2]string{
		{"node-ip", n.IP},
		{"pod-network", "bridge"},
		{"cni-conf-dir", c.path("cni", "net.d")},
		{"cluster-cidr", ClusterCIDR},
	}
	var b strings.Builder
	b.WriteString("  kubeletExtraArgs:\n")
	for _, a := range args {
		fmt.Fprintf(&b, "  - name: %s\n    value: %q\n", a[0], a[1])
	}
	return b.String()
}

// kubeadmInitConfig is the first node's kubeadm configuration: kubeadm's defaults but for
// what this machine needs (cgroupfs and cgroup v1, no swap check, and no disk-space
// eviction thresholds, as kind sets them: the nodes share the machine's disk, whose free
// space the rest of the machine uses — with kubeadm's 15 % imagefs threshold a 252 GiB disk
// with 38 GiB free evicted the suite's pods), the node's address, the
// pod and service ranges of the harness. The kube-proxy addon is kind's way: it changes no
// sysctl outside the node's network namespace (conntrack's limits and timeouts left alone)
// and serves NodePorts on the nodes' segment. No CoreDNS addon: kubeadm's Corefile
// forwards what it cannot answer to the machine's resolver, off the machine.
func (c *Config) kubeadmInitConfig() string {
	cp := c.KubeadmControlPlane()
	version, _ := KubeVersion(c.RepoDir)
	return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: %[1]q
  ttl: 2h0m0s
localAPIEndpoint:
  advertiseAddress: %[2]s
  bindPort: %[3]d
nodeRegistration:
  criSocket: %[4]s
  ignorePreflightErrors:
  - SystemVerification
%[5]spatches:
  directory: %[6]s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %[7]s
clusterName: nodeagent-kubeadm
controlPlaneEndpoint: %[2]s:%[3]d
networking:
  podSubnet: %[8]s
  serviceSubnet: %[9]s
  dnsDomain: %[10]s
dns:
  disabled: true
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
nodePortAddresses: [%[11]s]
%[12]s---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
evictionHard:
  memory.available: 100Mi
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
  imagefs.inodesFree: "0%%"
`, KubeadmToken, cp.IP, APIServerPort, c.criSocketURL(), c.kubeletExtraArgs(cp), c.kubeadmPatchDir(cp),
		version, ClusterCIDR, ServiceCIDR, ClusterDomain, lanCIDR, kubeProxyNoSysctls)
}

// kubeadmJoinConfig is a worker's JoinConfiguration: as an operator writes it (the CA
// pinned by its hash, preflight on but for the cgroup v1 check), or as kind writes it
// (pkg/cluster/internal/kubeadm/config.go of kind v0.33.0: the token, the CA unverified,
// preflight skipped, a provider ID), with the node's address and pod network.
func (c *Config) kubeadmJoinConfig(n Node, kind bool, caHash string) string {
	cp := c.KubeadmControlPlane()
	discovery := fmt.Sprintf("    caCertHashes:\n    - %s\n", caHash)
	skip, preflight := "", "  ignorePreflightErrors:\n  - SystemVerification\n"
	extra := c.kubeletExtraArgs(n)
	if kind {
		discovery = "    unsafeSkipCAVerification: true\n"
		skip, preflight = "skipPhases:\n- preflight\n", ""
		extra += fmt.Sprintf("  - name: provider-id\n    value: kind://docker/nodeagent/%s\n", n.Name)
	}
	return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
%[1]sdiscovery:
  bootstrapToken:
    apiServerEndpoint: %[2]s:%[3]d
    token: %[4]q
%[5]snodeRegistration:
  criSocket: %[6]s
%[7]s%[8]spatches:
  directory: %[9]s
`, skip, cp.IP, APIServerPort, KubeadmToken, discovery, c.criSocketURL(), preflight, extra, c.kubeadmPatchDir(n))
}

// writeKubeadmConfig writes a kubeadm configuration into node n's dir; the node sees it at
// the same path.
func (c *Config) writeKubeadmConfig(n Node, name, content string) (string, error) {
	dir := c.path("nodes", n.tag(), "kubeadm")
	if err := writeFiles(dir, map[string]string{name: content}); err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// kubeadmInit runs `kubeadm init` on the first node and makes its admin.conf the harness's
// admin kubeconfig, then grants the nodes the read of Nodes their pod network's routes need.
func (c *Config) kubeadmInit(ctx context.Context) error {
	cp := c.KubeadmControlPlane()
	cfg, err := c.writeKubeadmConfig(cp, "init.yaml", c.kubeadmInitConfig())
	if err != nil {
		return err
	}
	if err := c.RunKubeadm(ctx, cp, "init", "--config", cfg); err != nil {
		return err
	}
	admin, err := os.ReadFile(filepath.Join(c.KubeadmNodeDir(cp, "/etc/kubernetes"), "admin.conf"))
	if err != nil {
		return err
	}
	if err := writeFiles(c.path("pki"), map[string]string{"admin.conf": string(admin)}); err != nil {
		return err
	}
	return c.ApplyPodNetworkRBAC(ctx)
}

// kubeadmJoin joins node n: the operator's way, or kind's.
func (c *Config) kubeadmJoin(ctx context.Context, n Node, kind bool) error {
	caHash, err := c.kubeadmCAHash()
	if err != nil {
		return err
	}
	cfg, err := c.writeKubeadmConfig(n, "join.yaml", c.kubeadmJoinConfig(n, kind, caHash))
	if err != nil {
		return err
	}
	return c.RunKubeadm(ctx, n, "join", "--config", cfg)
}

// kubeadmCAHash is the cluster CA's public key pin as `kubeadm join` takes it:
// sha256:<hex of the SHA-256 of its SubjectPublicKeyInfo>.
func (c *Config) kubeadmCAHash() (string, error) {
	data, err := os.ReadFile(filepath.Join(c.KubeadmNodeDir(c.KubeadmControlPlane(), "/etc/kubernetes"), "pki", "ca.crt"))
	if err != nil {
		return "", err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return "", fmt.Errorf("ca.crt: no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// RunKubeadm runs kubeadm with args on node n, in the node's namespaces, with the node's
// PATH (the stand-in systemctl first) as a root shell there has it. Its output goes to
// logs/<tag>-kubeadm.log; a failure returns the end of it.
func (c *Config) RunKubeadm(ctx context.Context, n Node, args ...string) error {
	logPath := filepath.Join(c.LogDir(), n.daemon("kubeadm")+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "---- %s kubeadm %s\n", time.Now().Format(time.RFC3339), strings.Join(args, " "))
	cmd, err := c.NodeCommand(ctx, n, append([]string{"/usr/local/bin/kubeadm"}, append(args, "--v=1")...)...)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	_, _ = logf.Write(out.Bytes())
	if err != nil {
		return fmt.Errorf("kubeadm %s on %s: %w\n%s", args[0], n.Name, err, tail(out.Bytes(), 40))
	}
	return nil
}

// NodeCommand returns argv as a command to run in node n's namespaces (mount, network,
// PID, UTS), from its root dir, with the node's PATH and the stand-in's settings.
func (c *Config) NodeCommand(ctx context.Context, n Node, argv ...string) (*exec.Cmd, error) {
	rec, err := c.readPid(n.daemon("init"))
	if err != nil || !rec.alive() {
		return nil, fmt.Errorf("node %s is not running", n.Name)
	}
	ns := []string{"nsenter", fmt.Sprintf("--target=%d", rec.Pid), "--mount", "--net", "--pid", "--uts", "--wd=/", "--"}
	cmd := exec.CommandContext(ctx, ns[0], append(ns[1:], argv...)...)
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"SYSTEMCTL_UNIT_PATH=" + c.unitDir(n),
		"SYSTEMCTL_STATE_DIR=" + c.UnitStateDir(n),
	}
	cmd.WaitDelay = 10 * time.Second
	return cmd, nil
}

// stopNodeUnits stops the services the systemctl stand-in runs on node n (the agent that
// kubeadm started), as systemd would at shutdown: SIGTERM to each supervisor, which stops
// its service, and SIGKILL after the grace.
func (c *Config) stopNodeUnits(ctx context.Context, n Node) error {
	initRec, err := c.readPid(n.daemon("init"))
	if err != nil || !initRec.alive() {
		return nil
	}
	files, _ := filepath.Glob(filepath.Join(c.UnitStateDir(n), "*.pid"))
	var errs []error
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var nsPid int
		if _, err := fmt.Sscan(string(data), &nsPid); err != nil {
			continue
		}
		pid := hostPid(initRec.Pid, nsPid)
		if pid == 0 {
			continue
		}
		start := procStart(pid)
		alive := func() bool { return procStart(pid) == start && start != 0 }
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if !waitFor(ctx, 40*time.Second, func() bool { return !alive() }) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if !waitFor(ctx, 10*time.Second, func() bool { return !alive() }) {
				errs = append(errs, fmt.Errorf("%s of node %s survives SIGKILL", filepath.Base(f), n.Name))
			}
		}
	}
	// The services' logs outlive the run dir, as the harness's daemons' do.
	logs, _ := filepath.Glob(filepath.Join(c.UnitStateDir(n), "*.log"))
	for _, l := range logs {
		if data, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(c.LogDir(), n.tag()+"-"+filepath.Base(l)), data, 0o644)
		}
	}
	return errors.Join(errs...)
}
