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
	// A fresh run dir, but the conformance results and test artefacts of earlier runs stay.
	entries, _ := os.ReadDir(cfg.RunDir)
	for _, e := range entries {
		if e.Name() != conformanceDir && e.Name() != artefactsDir {
			if err := os.RemoveAll(filepath.Join(cfg.RunDir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(cfg.RunDir, 0o755); err != nil {
		return err
	}
	steps := []upStep{
		{"install packages", cfg.ensurePackages},
		{"node network", cfg.setupNetwork},
		{"cgroup root", func(context.Context) error { return cfg.createCgroupRoot() }},
	}
	if !cfg.Kubeadm { // kubeadm makes its own
		steps = append(steps, upStep{"PKI and kubeconfigs", func(context.Context) error { return cfg.writePKI() }})
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
	more := cfg.clusterSteps(bin)
	if cfg.Kubeadm {
		more = cfg.kubeadmSteps(bin)
	}
	for _, s := range more {
		if err := cfg.step(ctx, s.name, s.do); err != nil {
			return err
		}
	}
	cfg.ReportBuilds(start)
	cfg.Logf("cluster up in %s; run dir %s", time.Since(start).Round(time.Second), cfg.RunDir)
	return os.WriteFile(cfg.path("env"), []byte(cfg.Env()), 0o644)
}

// clusterSteps are the steps of Up for the harness's own cluster, after the upstream build:
// its control plane, then its nodes, then what runs on them.
func (c *Config) clusterSteps(bin string) []upStep {
	more := []upStep{
		{"etcd", func(ctx context.Context) error { return c.startEtcd(ctx, bin) }},
		{"kube-apiserver", func(ctx context.Context) error { return c.startAPIServer(ctx, bin) }},
		{"RBAC", c.bootstrapRBAC},
		{"pod network RBAC", func(ctx context.Context) error {
			if c.PodNetwork != PodNetworkAgent {
				return nil
			}
			return c.ApplyPodNetworkRBAC(ctx)
		}},
		{"kube-controller-manager", func(ctx context.Context) error { return c.startControllerManager(ctx, bin) }},
		{"kube-scheduler", func(ctx context.Context) error { return c.startScheduler(ctx, bin) }},
		{"registries", c.startRegistries},
		{"images pushed", func(ctx context.Context) error { return c.pushImages(ctx, bin) }},
		{c.Runtime, c.startContainerd},
		{"images pulled", c.pullImages},
		{"node agent (" + c.Agent + ")", func(ctx context.Context) error { return c.startAgent(ctx, bin) }},
	}
	for _, n := range c.Nodes()[1:] {
		more = append(more, upStep{"node " + n.Name, func(ctx context.Context) error { return c.startWholeNode(ctx, n, bin) }})
	}
	if c.NodeCount > 1 && c.PodNetwork == PodNetworkHarness {
		more = append(more, upStep{"routes between nodes", c.harnessRoutes})
	}
	if c.CSIHostpath {
		more = append(more, upStep{"CSI hostpath driver", c.deployCSIHostpath})
	}
	more = append(more, c.serviceSteps(bin)...)
	if c.VolumeSnapshots {
		more = append(more, upStep{"volume snapshots", c.installVolumeSnapshots})
	}
	return more
}

// Env is the shell environment to use the cluster with; the runtime is the first node's.
func (c *Config) Env() string {
	version, _ := KubeVersion(c.RepoDir)
	return fmt.Sprintf("export KUBECONFIG=%s\nexport PATH=%s:$PATH\nexport CONTAINER_RUNTIME_ENDPOINT=%s\n",
		c.Kubeconfig(), c.BinDir(version), c.NodeCRIEndpoint(c.Nodes()[0]))
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
	keep(cfg.removeMountpoints())
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
		if e.Name() != "logs" && e.Name() != conformanceDir && e.Name() != artefactsDir {
			keep(os.RemoveAll(filepath.Join(cfg.RunDir, e.Name())))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("teardown: %v", errs)
	}
	return nil
}
