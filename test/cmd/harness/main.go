// Command harness brings the local test cluster up or down.
//
//	harness up     tear down any earlier run, then bring up a fresh cluster
//	harness down   stop everything and remove what the harness made
//	harness env    print the shell lines to use the running cluster
//	harness packages  install the Debian packages the harness and the tests use, if missing
//	harness build  build (or find cached) the upstream binaries, the CSI sidecars, CoreDNS and containerd
//	harness build-conformance  also build the upstream conformance suite (e2e.test, ginkgo),
//	                           upstream busybox for its images and external-snapshotter
//	harness build-smoke        what the conformance smoke run builds: e2e.test, ginkgo and
//	                           external-snapshotter
//
// Settings come from the environment: NODEAGENT_RUN_DIR, NODEAGENT_CACHE_DIR,
// NODEAGENT_RUNTIME (containerd | containerd-debian), NODEAGENT_AGENT (nodeagent | kubelet | none),
// NODEAGENT_CSI_HOSTPATH=0 for a cluster without the hostpath CSI driver,
// NODEAGENT_SERVICES=0 for one without kube-proxy and CoreDNS, NODEAGENT_KUBEADM=1 for a
// cluster that kubeadm makes on nodes running nodeagent as their kubelet (NODES of them,
// default 3).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodeagent/nodeagent/test/harness"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: harness up|down|env|packages|build|build-conformance|build-smoke")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd string) error {
	// The user's cluster has a CSI driver and a default StorageClass, kube-proxy and
	// CoreDNS, unless asked not to.
	cfg := &harness.Config{
		CSIHostpath: os.Getenv("NODEAGENT_CSI_HOSTPATH") != "0",
		Services:    os.Getenv("NODEAGENT_SERVICES") != "0",
	}
	switch cmd {
	case "up":
		if err := harness.Up(ctx, cfg); err != nil {
			return err
		}
		fmt.Print(cfg.Env())
		return nil
	case "down":
		return harness.Down(ctx, cfg)
	case "packages":
		return cfg.EnsurePackages(ctx)
	case "env":
		if err := cfg.Complete(); err != nil {
			return err
		}
		fmt.Print(cfg.Env())
		return nil
	case "build":
		if err := cfg.Complete(); err != nil {
			return err
		}
		start := time.Now()
		if _, err := cfg.EnsureUpstream(ctx); err != nil {
			return err
		}
		if _, err := cfg.EnsureKubelet(ctx); err != nil {
			return err
		}
		if _, err := cfg.EnsureCSISidecars(ctx); err != nil {
			return err
		}
		if _, err := cfg.EnsureCoreDNS(ctx); err != nil {
			return err
		}
		if cfg.Runtime == harness.RuntimeContainerd {
			if _, err := cfg.EnsureContainerd(ctx); err != nil {
				return err
			}
			if _, err := cfg.EnsureRunc(ctx); err != nil {
				return err
			}
		}
		cfg.ReportBuilds(start)
		return nil
	case "build-conformance":
		if err := cfg.Complete(); err != nil {
			return err
		}
		start := time.Now()
		bb, err := cfg.EnsureBusybox(ctx)
		if err != nil {
			return err
		}
		if err := buildSmoke(ctx, cfg, start); err != nil {
			return err
		}
		fmt.Println(bb)
		return nil
	case "build-smoke":
		if err := cfg.Complete(); err != nil {
			return err
		}
		return buildSmoke(ctx, cfg, time.Now())
	default:
		return fmt.Errorf("unknown command %q: want up, down, env, packages, build, build-conformance or build-smoke", cmd)
	}
}

// buildSmoke builds what the conformance smoke run builds (make test's background build):
// its snapshot spec's csi-snapshotter and snapshot-controller (after the upstream build,
// whose compiled packages they share), and e2e.test; and prints where the suite
// is. Not busybox: the smoke's images keep Debian's (conformance.Options.DistroBusybox).
func buildSmoke(ctx context.Context, cfg *harness.Config, start time.Time) error {
	if _, err := cfg.EnsureSnapshotter(ctx); err != nil {
		return err
	}
	bin, err := cfg.EnsureConformance(ctx)
	if err != nil {
		return err
	}
	cfg.ReportBuilds(start)
	fmt.Println(bin)
	return nil
}
