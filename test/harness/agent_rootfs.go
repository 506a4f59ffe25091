package harness

import (
	"context"
	"fmt"
	"os"
	"slices"
)

// The agent's and the runtime's own small filesystems (Config.AgentRootFS,
// Config.RuntimeRootFS) and the agent's extra configuration
// (Config.AgentConfigExtra): what the eviction tests need to fill the node's filesystem
// without filling the machine's, and to set thresholds of their own.

// agentRootFSImage is the sparse file that holds the agent root dir's filesystem. It lies in
// the run dir, as does its mount point: teardown unmounts everything under the run dir and
// then detaches the loop devices of files there, a crashed run's too.
func (c *Config) agentRootFSImage() string { return c.path("agent-rootfs.ext4") }

// runtimeRootFSImage holds the runtime root's filesystem (Config.RuntimeRootFS), as
// agentRootFSImage the agent's.
func (c *Config) runtimeRootFSImage() string { return c.path("containerd-rootfs.ext4") }

// mountAgentRootFS puts the first node's agent root dir on an ext4 filesystem of
// AgentRootFS bytes of its own.
func (c *Config) mountAgentRootFS(ctx context.Context) error {
	return c.mountSmallFS(ctx, "agent root dir", c.agentRootFSImage(), c.AgentRootDir(), c.AgentRootFS)
}

// mountRuntimeRootFS puts the first node's containerd root (its content store and
// snapshots: the image filesystem) on an ext4 filesystem of RuntimeRootFS bytes of its own.
func (c *Config) mountRuntimeRootFS(ctx context.Context) error {
	root, _, _, _, _, _ := c.containerdPaths()
	return c.mountSmallFS(ctx, "runtime root", c.runtimeRootFSImage(), root, c.RuntimeRootFS)
}

// mountSmallFS puts dir on an ext4 filesystem of size bytes: a sparse file img, formatted
// and loop-mounted there. It keeps one already mounted (a daemon started again). No blocks
// are reserved for root, so that all of it shows as available to the daemons, which run
// as root.
func (c *Config) mountSmallFS(ctx context.Context, what, img, dir string, size int64) error {
	if slices.Contains(MountsUnder(dir), dir) {
		return nil
	}
	f, err := os.OpenFile(img, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s filesystem: %w", what, err)
	}
	// Inode tables and journal written now, not by the kernel's lazy init while a test
	// measures the filesystem.
	if _, err := run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", img); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := run(ctx, "mount", "-o", "loop", img, dir); err != nil {
		return err
	}
	c.Logf("%s on an ext4 filesystem of %d MiB of its own", what, size>>20)
	return nil
}

// agentConfigDropin is the drop-in that carries AgentConfigExtra, in the agent's
// --config-dir.
func agentConfigDropin(extra string) string {
	return "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + extra
}

// agentConfigDir is the agents' --config-dir when AgentConfigExtra is set.
func (c *Config) agentConfigDir() string { return c.path("agent", "config.d") }
