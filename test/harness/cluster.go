package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// daemonOrder is the start order; teardown goes the other way.
var daemonOrder = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "registry", "registry-auth", "containerd", "agent"}

// Up brings up a fresh cluster: it first tears down whatever an earlier run left (live or
// crashed), installs what is missing, builds what is not cached, then starts every part and
// waits for each to be ready. On return the admin kubeconfig is at Kubeconfig().
func Up(ctx context.Context, cfg *Config) error {
	if err := cfg.Complete(); err != nil {
		return err
	}
	if err := cfg.lockRunDir(); err != nil {
		return err
	}
	start := time.Now()
	if err := Down(ctx, cfg); err != nil {
		return fmt.Errorf("clean up the previous run: %w", err)
	}
	// A fresh run dir, but the conformance results of earlier runs stay.
	entries, _ := os.ReadDir(cfg.RunDir)
	for _, e := range entries {
		if e.Name() != conformanceDir {
			if err := os.RemoveAll(filepath.Join(cfg.RunDir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(cfg.RunDir, 0o755); err != nil {
		return err
	}
	steps := []struct {
		name string
		do   func(context.Context) error
	}{
		{"install packages", cfg.ensurePackages},
		{"node network", cfg.setupNetwork},
		{"cgroup root", func(context.Context) error { return cfg.createCgroupRoot() }},
		{"PKI and kubeconfigs", func(context.Context) error { return cfg.writePKI() }},
	}
	for _, s := range steps {
		if err := cfg.step(ctx, s.name, s.do); err != nil {
			return err
		}
	}
	var bin string
	if err := cfg.step(ctx, "upstream binaries", func(ctx context.Context) (err error) {
		bin, err = cfg.EnsureUpstream(ctx)
		return err
	}); err != nil {
		return err
	}
	more := []struct {
		name string
		do   func(context.Context) error
	}{
		{"etcd", func(ctx context.Context) error { return cfg.startEtcd(ctx, bin) }},
		{"kube-apiserver", func(ctx context.Context) error { return cfg.startAPIServer(ctx, bin) }},
		{"RBAC", cfg.bootstrapRBAC},
		{"pod network RBAC", func(ctx context.Context) error {
			if cfg.PodNetwork != PodNetworkAgent {
				return nil
			}
			return cfg.ApplyPodNetworkRBAC(ctx)
		}},
		{"kube-controller-manager", func(ctx context.Context) error { return cfg.startControllerManager(ctx, bin) }},
		{"kube-scheduler", func(ctx context.Context) error { return cfg.startScheduler(ctx, bin) }},
		{"registries", cfg.startRegistries},
		{"images pushed", func(ctx context.Context) error { return cfg.pushImages(ctx, bin) }},
		{cfg.Runtime, cfg.startContainerd},
		{"images pulled", cfg.pullImages},
		{"node agent (" + cfg.Agent + ")", func(ctx context.Context) error { return cfg.startAgent(ctx, bin) }},
	}
	for _, n := range cfg.Nodes()[1:] {
		more = append(more, struct {
			name string
			do   func(context.Context) error
		}{"node " + n.Name, func(ctx context.Context) error { return cfg.startWholeNode(ctx, n, bin) }})
	}
	if cfg.NodeCount > 1 && cfg.PodNetwork == PodNetworkHarness {
		more = append(more, struct {
			name string
			do   func(context.Context) error
		}{"routes between nodes", cfg.harnessRoutes})
	}
	if cfg.CSIHostpath {
		more = append(more, struct {
			name string
			do   func(context.Context) error
		}{"CSI hostpath driver", cfg.deployCSIHostpath})
	}
	more = append(more, cfg.serviceSteps(bin)...)
	for _, s := range more {
		if err := cfg.step(ctx, s.name, s.do); err != nil {
			return err
		}
	}
	cfg.ReportBuilds(start)
	cfg.Logf("cluster up in %s; run dir %s", time.Since(start).Round(time.Second), cfg.RunDir)
	return os.WriteFile(cfg.path("env"), []byte(cfg.Env()), 0o644)
}

// Env is the shell environment to use the cluster with.
func (c *Config) Env() string {
	version, _ := KubeVersion(c.RepoDir)
	return fmt.Sprintf("export KUBECONFIG=%s\nexport PATH=%s:$PATH\nexport CONTAINER_RUNTIME_ENDPOINT=%s\n",
		c.Kubeconfig(), c.BinDir(version), c.CRIEndpoint())
}

func (c *Config) step(ctx context.Context, name string, do func(context.Context) error) error {
	start := time.Now()
	c.record.beginStep(name)
	if err := do(ctx); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	c.record.endStep(name, time.Since(start))
	c.Logf("%-28s %s", name, time.Since(start).Round(10*time.Millisecond))
	return nil
}

// Down stops everything the harness started and removes what it made: pods' sandboxes and
// containers, processes (by pid file), mounts under the run dir, loop devices of files
// there, pod cgroups, the network
// pieces and the run dir's state. The logs and conformance results stay in the run dir. It is safe to run on a
// clean machine, twice, or after a crash.
func Down(ctx context.Context, cfg *Config) error {
	if err := cfg.Complete(); err != nil {
		return err
	}
	if err := cfg.lockRunDir(); err != nil {
		return err
	}
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	keep(cfg.stopNodes(ctx))
	keep(cfg.stopDaemon(ctx, "agent", 30*time.Second))
	if cfg.Running("containerd") {
		keep(cfg.removeAllPods(ctx))
	}
	keep(cfg.stopAll(ctx, daemonOrder))
	keep(cfg.cleanupKubeChains(ctx))
	keep(cfg.killStaleContainers(ctx))
	unmountErr := cfg.unmountAll()
	keep(unmountErr)
	if unmountErr == nil {
		keep(detachLoopDevices(cfg.RunDir))
	}
	keep(cfg.removeCgroups())
	keep(cfg.teardownNetwork(ctx))
	entries, _ := os.ReadDir(cfg.RunDir)
	if unmountErr != nil {
		entries = nil // never recurse into a file system still mounted under the run dir
	}
	for _, e := range entries {
		if e.Name() != "logs" && e.Name() != conformanceDir {
			keep(os.RemoveAll(filepath.Join(cfg.RunDir, e.Name())))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("teardown: %v", errs)
	}
	return nil
}
