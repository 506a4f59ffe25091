package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// packages are the Debian packages the harness runs, by a file each one installs.
var packages = map[string]string{
	"containerd":                  "/usr/bin/containerd",
	"runc":                        "/usr/sbin/runc",
	"containernetworking-plugins": "/usr/lib/cni/bridge",
	"iptables":                    "/usr/sbin/iptables",
	"iproute2":                    "/usr/sbin/ip",
	"busybox-static":              "/bin/busybox",
	"docker-registry":             "/usr/bin/docker-registry",
	"curl":                        "/usr/bin/curl",          // copied into the agnhost image
	"bind9-dnsutils":              "/usr/bin/dig",           // copied into agnhost and glibc-dns-testing
	"netcat-openbsd":              "/bin/nc.openbsd",        // copied into agnhost as nc
	"e2fsprogs":                   "/sbin/mkfs.ext4",        // Config.AgentRootFS
	"mount":                       "/bin/mount",             // loop-mounts Config.AgentRootFS
	"libseccomp-dev":              "/usr/include/seccomp.h", // the runc the harness builds
	"pkg-config":                  "/usr/bin/pkg-config",
}

var aptMu sync.Mutex

// EnsurePackages installs whatever Debian package of the harness is missing: before the
// unit tests too, whose real-kernel tests use iptables and ip.
func (c *Config) EnsurePackages(ctx context.Context) error {
	if err := c.Complete(); err != nil {
		return err
	}
	return c.ensurePackages(ctx)
}

// ensurePackages installs with apt-get whatever package of the harness is missing. apt may
// try to start services on install; with no systemd here it cannot, and the harness starts
// every daemon itself.
func (c *Config) ensurePackages(ctx context.Context) error {
	var missing []string
	for pkg, file := range packages {
		if _, err := os.Stat(file); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	aptMu.Lock()
	defer aptMu.Unlock()
	c.Logf("installing %s", strings.Join(missing, " "))
	if _, err := run(ctx, "apt-get", "update", "-qq"); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %w\n%s", strings.Join(missing, " "), err, tail(out, 3000))
	}
	return nil
}
