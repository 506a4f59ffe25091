package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/nodeagent/nodeagent/test/harness"
)

// What a run leaves: the tables on stdout, and beside the JSON results (<stamp>.json) the
// plots (<stamp>-start-cdf.svg, with -scale <stamp>-start-cdf-<N>pods.svg and
// <stamp>-scaling.svg).

// reportPods prints the tables of one pod count and writes its start-latency plot.
func reportPods(w io.Writer, cfg *harness.Config, o options, stamp string, pr podsRun) {
	writeTable(w, figuresFor(o.pvc), pr.Results)
	writeStepTable(w, pr.Results)
	writeCPUTable(w, pr.Results)
	writeDeleteCPUTable(w, pr.Results)
	writeElseTable(w, pr.Results)
	writeRuntimeCallsTables(w, pr.Results, pr.Pods)
	writeIdleSeconds(w, pr.Results)
	c := cdfChart(pr)
	if c == nil {
		return
	}
	name := stamp + "-start-cdf.svg"
	if o.scale {
		name = fmt.Sprintf("%s-start-cdf-%dpods.svg", stamp, pr.Pods)
	}
	title := "Pod start latency: " + strings.Join(sidesOf(pr.Results), ", ")
	if err := writePlot(resultsPath(cfg, o, name), title, []chart{*c}); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	}
}

// reportScaling prints the scaling table of a -scale run and writes its plot.
func reportScaling(w io.Writer, cfg *harness.Config, o options, stamp string, runs []podsRun) {
	curves := scalingCurves(runs, o.hold)
	writeScalingTable(w, curves)
	charts := scalingCharts(curves)
	if len(charts) == 0 {
		return
	}
	title := fmt.Sprintf("Agent CPU per pod as N grows (issue 24's goal: at most %.1f× from the smallest N to the largest)", growthGoal)
	if err := writePlot(resultsPath(cfg, o, stamp+"-scaling.svg"), title, charts); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	}
}

// sidesOf are the sides of results, in the main table's order.
func sidesOf(results map[string]sideResult) []string {
	var out []string
	for _, side := range []string{"nodeagent", "kubelet", "floor"} {
		if _, ok := results[side]; ok {
			out = append(out, side)
		}
	}
	return out
}

// resultsPath is where the results' file name goes: under -out, itself under the repo
// unless absolute.
func resultsPath(cfg *harness.Config, o options, name string) string {
	if filepath.IsAbs(o.outDir) {
		return filepath.Join(o.outDir, name)
	}
	return filepath.Join(cfg.RepoDir, o.outDir, name)
}

// writeJSON writes everything measured so far to <stamp>.json: one pod count's results
// under "results", or with -scale each pod count's under "scale", with the scaling curves.
func writeJSON(cfg *harness.Config, o options, stamp string, runs []podsRun) error {
	version, _ := harness.KubeVersion(cfg.RepoDir)
	commit, _ := exec.Command("git", "-C", cfg.RepoDir, "rev-parse", "--short", "HEAD").Output()
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	var mem int64
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		fmt.Sscanf(strings.SplitN(string(data), "\n", 2)[0], "MemTotal: %d kB", &mem)
	}
	maxPods := cfg.MaxPods
	if maxPods == 0 {
		maxPods = defaultMaxPods
	}
	out := map[string]any{
		"time":    time.Now().UTC().Format(time.RFC3339),
		"machine": map[string]any{"cores": runtime.NumCPU(), "memoryMiB": mem / 1024, "kernel": strings.TrimSpace(string(kernel))},
		"versions": map[string]string{
			"kubernetes": version, "containerd": harness.ContainerdVersion, "nodeagent": strings.TrimSpace(string(commit)),
		},
		"rounds": o.rounds, "holdSeconds": o.hold.Seconds(), "execReadinessProbe": o.probe, "pvc": o.pvc,
		"maxPods": maxPods,
	}
	if o.scale {
		out["podCounts"] = o.ns
		out["scale"] = runs
		out["scaling"] = scalingCurves(runs, o.hold)
	} else if len(runs) > 0 {
		out["pods"] = runs[0].Pods
		out["results"] = runs[0].Results
	}
	if f := fleetOf(runs); f != nil {
		out["fleet"] = f
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	path := resultsPath(cfg, o, stamp+".json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: results in %s\n", path)
	return os.WriteFile(path, data, 0o644)
}
