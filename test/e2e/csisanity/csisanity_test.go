//go:build e2e

// Package csisanity checks the project's hostpath CSI driver (test/csi/hostpath) with
// csi-sanity from kubernetes-csi/csi-test: the driver binary runs on this machine, on a
// socket and state dir of a temporary directory, without the harness cluster. It needs
// root (bind mounts, loop devices). Each run must pass every spec, and leave no mount and
// no loop device behind once the driver is stopped.
package csisanity

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeagent/nodeagent/test/harness"
)

func TestCSISanity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("csi-sanity against the hostpath driver needs root: it bind-mounts and attaches loop devices")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := &harness.Config{}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	sanity, err := cfg.EnsureCSISanity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	driver := filepath.Join(t.TempDir(), "csi-hostpath")
	build := exec.CommandContext(ctx, "go", "build", "-o", driver, "./test/images/csi-hostpath")
	build.Dir = cfg.RepoDir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the driver: %v\n%s", err, out)
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
			runSanity(ctx, t, driver, sanity, run.accessType, run.driverArgs, run.sanityArgs)
		})
	}
}

// runSanity starts the driver in a fresh directory, runs csi-sanity against it, stops the
// driver and checks that nothing it made is left.
func runSanity(ctx context.Context, t *testing.T, driver, sanity, accessType string, driverArgs, sanityArgs []string) {
	// A short path: a unix socket's path is limited to 107 bytes.
	dir, err := os.MkdirTemp("", "csisanity-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "csi.sock")
	var driverLog bytes.Buffer
	cmd := exec.Command(driver, append([]string{
		"--endpoint=unix://" + sock, "--nodeid=sanity-node", "--statedir=" + filepath.Join(dir, "state"), "--v=2",
	}, driverArgs...)...)
	cmd.Stdout, cmd.Stderr = &driverLog, &driverLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("driver exited with %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("driver (pid %d) did not stop on SIGTERM", cmd.Process.Pid)
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("driver log:\n%s", tailOf(driverLog.String(), 20000))
		}
		// Take down what a failed run left, so the machine stays clean; the checks
		// below have reported it already.
		for _, m := range mountsUnder(t, dir) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
		for _, dev := range loopsUnder(t, dir) {
			detachLoop(dev)
		}
		_ = os.RemoveAll(dir)
	})
	if err := waitForSocket(ctx, sock); err != nil {
		t.Fatalf("driver: %v", err)
	}

	args := append([]string{
		"--csi.endpoint=" + sock,
		"--csi.stagingdir=" + filepath.Join(dir, "staging"),
		"--csi.mountdir=" + filepath.Join(dir, "mount"),
		"--csi.testvolumeaccesstype=" + accessType,
		"--ginkgo.no-color",
	}, sanityArgs...)
	out, err := exec.CommandContext(ctx, sanity, args...).CombinedOutput()
	summary := summaryLine(string(out))
	t.Logf("csi-sanity (%s): %s", accessType, summary)
	if err != nil {
		t.Errorf("csi-sanity failed (%v):\n%s", err, tailOf(string(out), 30000))
	}
	if m := regexp.MustCompile(`(\d+) Failed`).FindStringSubmatch(summary); m == nil || m[1] != "0" {
		t.Errorf("csi-sanity summary does not say 0 Failed: %q", summary)
	}

	stop()
	if left := mountsUnder(t, dir); len(left) > 0 {
		t.Errorf("mounts left under %s: %v", dir, left)
	}
	if left := loopsUnder(t, dir); len(left) > 0 {
		t.Errorf("loop devices left bound to files under %s: %v", dir, left)
	}
}

func waitForSocket(ctx context.Context, sock string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if st, err := os.Stat(sock); err == nil && st.Mode()&os.ModeSocket != 0 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("socket %s did not appear in 30s", sock)
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

// mountsUnder lists the mount points at or below dir in this mount namespace, deepest first.
func mountsUnder(t *testing.T, dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if p := f[4]; p == dir || strings.HasPrefix(p, dir+"/") {
			out = append([]string{p}, out...)
		}
	}
	return out
}

// loopsUnder lists the loop devices bound to a file below dir.
func loopsUnder(t *testing.T, dir string) []string {
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(string(data)), dir+"/") {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}

// detachLoop unbinds a loop device (LOOP_CLR_FD).
func detachLoop(dev string) {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
