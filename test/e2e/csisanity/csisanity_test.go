//go:build e2e

// Package csisanity checks the project's hostpath CSI driver (test/csi/hostpath) on this
// machine, without the harness cluster: csi-sanity from kubernetes-csi/csi-test against
// the driver binary, and the driver's own behaviour with real bind mounts and loop devices
// (inline ephemeral volumes, read-only publishing, a restart, injected failures). It needs
// root. Every run must leave no mount and no loop device behind once the driver is stopped.
package csisanity

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestCSISanity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg, driver := setup(t, ctx)
	sanity, err := cfg.EnsureCSISanity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []struct {
		name       string
		accessType string
		driverArgs []string
		sanityArgs []string
	}{
		{name: "mount", accessType: "mount"},
		{name: "mount-attach-topology", accessType: "mount",
			driverArgs: []string{"--enable-attach", "--topology-key=topology.hostpath.csi/node", "--max-volumes-per-node=4"},
			sanityArgs: []string{"--csi.testnodevolumeattachlimit"}},
		{name: "block-attach", accessType: "block", driverArgs: []string{"--enable-attach"}},
	} {
		t.Run(run.name, func(t *testing.T) {
			dir := workDir(t)
			p := startDriver(t, driver, dir, run.driverArgs...)
			args := append([]string{
				"--csi.endpoint=" + p.sock,
				"--csi.stagingdir=" + filepath.Join(dir, "staging"),
				"--csi.mountdir=" + filepath.Join(dir, "mount"),
				"--csi.testvolumeaccesstype=" + run.accessType,
				"--ginkgo.no-color",
			}, run.sanityArgs...)
			out, err := exec.CommandContext(ctx, sanity, args...).CombinedOutput()
			summary := summaryLine(string(out))
			t.Logf("csi-sanity (%s): %s", run.accessType, summary)
			if err != nil {
				t.Errorf("csi-sanity failed (%v):\n%s", err, tailOf(string(out), 30000))
			}
			if m := regexp.MustCompile(`(\d+) Failed`).FindStringSubmatch(summary); m == nil || m[1] != "0" {
				t.Errorf("csi-sanity summary does not say 0 Failed: %q", summary)
			}
			p.stop()
			checkNothingLeft(t, dir)
		})
	}
}

// summaryLine returns ginkgo's "N Passed | N Failed | N Pending | N Skipped" line.
func summaryLine(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " Passed | ") {
			return strings.TrimSpace(line)
		}
	}
	return "(no ginkgo summary in the output)"
}
