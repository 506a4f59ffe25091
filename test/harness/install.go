package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
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

// aptMu keeps the harness's apt-get runs one at a time.
var aptMu sync.Mutex

// EnsurePackages installs whatever Debian package of the harness is missing: before the
// unit tests too, whose real-kernel tests use iptables and ip.
func (c *Config) EnsurePackages(ctx context.Context) error {
	if err := c.Complete(); err != nil {
		return err
	}
	return c.ensurePackages(ctx)
}

// EnsureExtraPackages installs what is missing of pkgs, Debian packages each by a file it
// installs: packages that one test needs and that the harness does not install up front,
// because they are big and only that test uses them (chromium, for a screenshot). c is
// complete (Up and Complete make it so); tests running side by side may call it on their
// cluster's Config, since it changes nothing of c.
func (c *Config) EnsureExtraPackages(ctx context.Context, pkgs map[string]string) error {
	return c.aptInstall(ctx, pkgs)
}

// ensurePackages installs whatever package of the harness is missing.
func (c *Config) ensurePackages(ctx context.Context) error {
	return c.aptInstall(ctx, packages)
}

// aptInstall installs with apt-get those of pkgs (package: a file it installs) whose file
// is missing. apt may try to start services on install; with no systemd here it cannot,
// and the harness starts every daemon itself.
func (c *Config) aptInstall(ctx context.Context, pkgs map[string]string) error {
	if len(missingPackages(pkgs)) == 0 {
		return nil
	}
	aptMu.Lock()
	defer aptMu.Unlock()
	missing := missingPackages(pkgs) // again: another caller may have installed them meanwhile
	if len(missing) == 0 {
		return nil
	}
	c.Logf("installing %s", strings.Join(missing, " "))
	if _, err := run(ctx, "apt-get", "update", "-qq"); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %w\n%s", strings.Join(missing, " "), err, tail(out, 3000))
	}
	if still := missingPackages(pkgs); len(still) > 0 {
		return fmt.Errorf("apt-get install %s: the files of %s are still missing", strings.Join(missing, " "), strings.Join(still, " "))
	}
	return nil
}

// missingPackages are those of pkgs whose file is not there, sorted.
func missingPackages(pkgs map[string]string) []string {
	var missing []string
	for pkg, file := range pkgs {
		if _, err := os.Stat(file); err != nil {
			missing = append(missing, pkg)
		}
	}
	sort.Strings(missing)
	return missing
}
