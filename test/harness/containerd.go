package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const cniBinDir = "/usr/lib/cni" // Debian's containernetworking-plugins

// TestRuntimeHandler is a second runtime handler the harness's containerd
// offers beside its default: runc with the same options, under another
// name, for tests of RuntimeClass.
const TestRuntimeHandler = "nodeagent-test"

// containerdPaths are the runtime's own directories, never the system defaults.
func (c *Config) containerdPaths() (root, state, runcRoot, certs, cniConf, ipam string) {
	return c.path("containerd", "root"), c.path("containerd", "state"), c.path("containerd", "runc"),
		c.path("containerd", "certs.d"), c.path("cni", "net.d"), c.path("cni", "ipam")
}

// RuntimeRootDir is the first node's containerd root: its content store and snapshots, the
// node's image filesystem.
func (c *Config) RuntimeRootDir() string {
	root, _, _, _, _, _ := c.containerdPaths()
	return root
}

// PodIPAMDir is where the harness's pod network (host-local IPAM) records the first node's
// pod IPs in use: a file per IP under a directory per network.
func (c *Config) PodIPAMDir() string {
	_, _, _, _, _, ipam := c.containerdPaths()
	return ipam
}

// pauseImage is the sandbox image: the name a kubelet user expects, served by the local
// registry through the registry.k8s.io mirror.
func pauseImage() string { return "registry.k8s.io/pause:" + PauseTag }

// containerdConfig renders the runtime's configuration: cgroupfs, the harness's runc root,
// netns under the state dir, CNI from the harness's conf dir, registries from certs.d, and
// runc under a second handler name (TestRuntimeHandler); runc is the binary both handlers run;
// a metrics address when RuntimeMetricsAddr is set.
func (c *Config) containerdConfig(runc string) string {
	metrics := ""
	if c.RuntimeMetricsAddr != "" {
		metrics = fmt.Sprintf("[metrics]\n  address = %q\n", c.RuntimeMetricsAddr)
	}
	return c.containerdPlugins(runc) + metrics
}

// containerdPlugins is the configuration but for its metrics.
func (c *Config) containerdPlugins(runc string) string {
	root, state, runcRoot, certs, cniConf, _ := c.containerdPaths()
	sock := c.criSocket()
	if c.Runtime == RuntimeContainerdDebian {
		return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[10]q
        Root = %[5]q
        SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[9]s]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[9]s.options]
        BinaryName = %[10]q
        Root = %[5]q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[8]q
`, root, state, sock, pauseImage(), runcRoot, cniBinDir, cniConf, certs, TestRuntimeHandler, runc)
	}
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.snapshotter.v1.blockfile"]
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[4]q
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %[8]q
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %[10]q
        Root = %[5]q
        SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[9]s]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[9]s.options]
        BinaryName = %[10]q
        Root = %[5]q
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[6]q]
    conf_dir = %[7]q
`, root, state, sock, pauseImage(), runcRoot, cniBinDir, cniConf, certs, TestRuntimeHandler, runc)
}

// cniConflist is the pod network: a bridge with host-local IPAM on the node's pod CIDR,
// and portmap for hostPort. One node masquerades what leaves its pod CIDR through the
// bridge plugin; with several, traffic between pod CIDRs keeps its pod IPs, and the
// harness's own rule masquerades only what leaves the cluster CIDR (harnessRoutes).
func (c *Config) cniConflist(n Node) ([]byte, error) {
	_, _, _, _, _, ipam := c.containerdPaths()
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       cniNet,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": bridgeDev, "isGateway": true, "ipMasq": c.NodeCount == 1, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.PodCIDR()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": ipam,
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// registryHosts maps each registry name to the local registry that serves it: the two
// local endpoints themselves, and mirrors of the public registries whose images the tests
// use, so that no pull ever leaves the machine. The other nodes reach the registries on the
// shared segment, where their 127.0.0.1 is not the machine's.
func registryHosts(n Node) map[string]string {
	open, auth := RegistryAddr, AuthRegistry
	if n.Index > 0 {
		open, auth = lanRegistryAddr, lanAuthRegistry
	}
	return map[string]string{
		RegistryAddr:      "http://" + open,
		AuthRegistry:      "http://" + auth,
		"registry.k8s.io": "http://" + open,
		"docker.io":       "http://" + open,
	}
}

// writeContainerdConfig writes node n's runtime configuration into the node's own dirs.
// The harness writes the pod network's CNI configuration unless the agent makes the pod
// network itself.
func (c *Config) writeContainerdConfig(n Node, runc string) error {
	certs, cniConf := c.nodePath(n, "containerd", "certs.d"), c.nodePath(n, "cni", "net.d")
	for name, server := range registryHosts(n) {
		hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n", server, server)
		// containerd looks a registry up by its "host:port" directory, verbatim.
		if err := writeFiles(filepath.Join(certs, name), map[string]string{"hosts.toml": hosts}); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return err
	}
	if c.PodNetwork == PodNetworkHarness {
		conflist, err := c.cniConflist(n)
		if err != nil {
			return err
		}
		if err := writeFiles(cniConf, map[string]string{"10-nodeagent.conflist": string(conflist)}); err != nil {
			return err
		}
	}
	return writeFiles(c.nodePath(n, "containerd"), map[string]string{"config.toml": c.containerdConfig(runc)})
}

// containerdBinary returns the containerd to run, the PATH it needs to find its shim, and
// the runc its handlers run: Debian's with Debian's containerd, else the one the harness
// builds.
func (c *Config) containerdBinary(ctx context.Context) (bin string, env []string, runc string, err error) {
	if c.Runtime == RuntimeContainerdDebian {
		return "/usr/bin/containerd", nil, "/usr/sbin/runc", nil
	}
	dir, err := c.EnsureContainerd(ctx)
	if err != nil {
		return "", nil, "", err
	}
	if runc, err = c.EnsureRunc(ctx); err != nil {
		return "", nil, "", err
	}
	return filepath.Join(dir, "containerd"), []string{"PATH=" + dir + ":" + os.Getenv("PATH")}, runc, nil
}

func (c *Config) startContainerd(ctx context.Context) error {
	return c.startNodeContainerd(ctx, nodeAt(0))
}

func (c *Config) startNodeContainerd(ctx context.Context, n Node) error {
	bin, env, runc, err := c.containerdBinary(ctx)
	if err != nil {
		return err
	}
	if err := c.writeContainerdConfig(n, runc); err != nil {
		return err
	}
	if c.RuntimeRootFS > 0 && n.Index == 0 {
		if err := c.mountRuntimeRootFS(ctx); err != nil {
			return err
		}
	}
	// The path of the config is the same on every node: each sees its own there.
	if _, err := c.startNodeDaemon(n, "containerd", bin, []string{"--config", c.path("containerd", "config.toml")}, env); err != nil {
		return err
	}
	return c.waitReady(ctx, n.daemon("containerd"), time.Minute, func(ctx context.Context) error {
		rt, _, closeFn, err := c.NodeCRI(ctx, n)
		if err != nil {
			return err
		}
		defer closeFn()
		_, err = rt.Version(ctx, &runtimeapi.VersionRequest{})
		return err
	})
}

// StopContainerd stops the runtime as an outage would; its containers keep running.
func (c *Config) StopContainerd(ctx context.Context) error {
	return c.stopDaemon(ctx, "containerd", 30*time.Second)
}

// StartContainerd starts the runtime again after StopContainerd.
func (c *Config) StartContainerd(ctx context.Context) error { return c.startContainerd(ctx) }

// CRI dials the first node's CRI socket.
func (c *Config) CRI(ctx context.Context) (runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient, func(), error) {
	return c.NodeCRI(ctx, nodeAt(0))
}

// NodeCRI dials node n's CRI socket.
func (c *Config) NodeCRI(ctx context.Context, n Node) (runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient, func(), error) {
	conn, err := grpc.NewClient(c.NodeCRIEndpoint(n), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, nil, err
	}
	return runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn), func() { conn.Close() }, nil
}
