// Command conformance runs the upstream conformance suite against a harness cluster whose
// node is nodeagent (or the upstream kubelet), then tears the cluster down. Results go to
// <run dir>/conformance/<name>/ (JUnit, summary, ginkgo log, images, the cluster's logs);
// the last line printed is "N passed, N failed".
//
//	conformance            the default focus: sig-node and node-local sig-storage [Conformance] specs
//	conformance -smoke     a few fast specs; exits non-zero on any failure
//	conformance -compare   the Markdown table of docs/conformance.md from the last nodeagent and kubelet runs
//	conformance -scope=all every [Conformance] spec on two nodes (results in <node>-all/)
//	conformance -scope=csimock the [sig-storage] CSI Mock specs that run on one node (results in <node>-csimock/)
//
// Settings from the environment (flags win): CONFORMANCE_NODE (nodeagent | kubelet), CONFORMANCE_SCOPE, FOCUS,
// SKIP, PROCS; the harness's own (NODEAGENT_RUN_DIR, NODEAGENT_CACHE_DIR, NODEAGENT_RUNTIME).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nodeagent/nodeagent/test/conformance"
	"github.com/nodeagent/nodeagent/test/harness"
)

func main() {
	procs, _ := strconv.Atoi(os.Getenv("PROCS"))
	opts := conformance.Options{}
	smoke := flag.Bool("smoke", false, "run the smoke subset (conformance.SmokeSpecs) and exit non-zero on any failure")
	flag.StringVar(&opts.Scope, "scope", os.Getenv("CONFORMANCE_SCOPE"), "empty for the node-local focus on one node; \"all\": every [Conformance] spec on two nodes, the [Serial] ones alone after the rest; \"node\": the [NodeConformance] specs that are not [Conformance], on two nodes; \"csimock\": the [sig-storage] CSI Mock specs that run on one node")
	flag.StringVar(&opts.Agent, "node", envOr("CONFORMANCE_NODE", harness.AgentNodeagent), "the node agent: nodeagent or kubelet")
	flag.StringVar(&opts.Focus, "focus", os.Getenv("FOCUS"), "ginkgo focus regexp (default: sig-node and node-local sig-storage [Conformance] specs)")
	flag.StringVar(&opts.Skip, "skip", os.Getenv("SKIP"), "ginkgo skip regexp (default: "+conformance.DefaultSkip+")")
	flag.IntVar(&opts.Procs, "procs", procs, "ginkgo processes (default two per core)")
	flag.DurationVar(&opts.Timeout, "timeout", 3*time.Hour, "the whole suite's timeout")
	compare := flag.Bool("compare", false, "print the per-group table of the last nodeagent and kubelet runs (for docs/conformance.md) and exit")
	flag.Parse()
	if *compare {
		if err := writeComparison(&harness.Config{}, opts.Scope); err != nil {
			fmt.Fprintln(os.Stderr, "conformance:", err)
			os.Exit(1)
		}
		return
	}
	if *smoke {
		if opts.Focus == "" {
			opts.Focus = conformance.SmokeFocus()
		}
		opts.Name = "smoke-" + opts.Agent
		opts.FewImages = true
		opts.CSIMockDrivers = true
		opts.VolumeSnapshots = true
		opts.DistroBusybox = true
	} else if opts.Scope != "" {
		opts.Name = opts.Agent + "-" + opts.Scope
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Services and DNS, as the suite's network specs and many others expect of a cluster.
	res, err := conformance.Run(ctx, &harness.Config{Services: true}, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
	fmt.Printf("\nconformance: results in %s (summary.txt, junit_01.xml, images.txt)\n", res.Dir)
	for _, sp := range res.Specs {
		if sp.Failed() {
			fmt.Printf("FAILED %s\n    %s\n", sp.Name, sp.Reason)
		}
	}
	fmt.Printf("%d skipped\n%s\n", res.Skipped, res.Line())
	// Every smoke spec must have run and passed: a focus that selects fewer (a spec renamed
	// upstream) is a failure too.
	if *smoke && (res.Failed > 0 || res.Passed < len(conformance.SmokeSpecs)) {
		fmt.Printf("smoke: %d of the %d smoke specs passed\n", res.Passed, len(conformance.SmokeSpecs))
		os.Exit(1)
	}
}

func writeComparison(cfg *harness.Config, scope string) error {
	if err := cfg.Complete(); err != nil {
		return err
	}
	var sums []*conformance.Summary
	for _, node := range []string{harness.AgentNodeagent, harness.AgentKubelet} {
		if scope != "" {
			node += "-" + scope
		}
		sum, err := conformance.LoadSummary(filepath.Join(cfg.ConformanceDir(), node))
		if err != nil {
			return err
		}
		sums = append(sums, sum)
	}
	if scope == conformance.ScopeAll {
		return conformance.WriteComparisonBy(os.Stdout, sums[0], sums[1], conformance.SIG)
	}
	return conformance.WriteComparison(os.Stdout, sums[0], sums[1])
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
