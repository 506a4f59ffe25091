//go:build e2e

package csisanity

import (
	"context"
	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeagent/nodeagent/test/harness"
)

// setup skips without root, and returns the harness config and the driver binary, built
// from this checkout.
func setup(t *testing.T, ctx context.Context) (*harness.Config, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the hostpath driver needs root: it bind-mounts and attaches loop devices")
	}
	cfg := &harness.Config{}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	driver := filepath.Join(t.TempDir(), "csi-hostpath")
	build := exec.CommandContext(ctx, "go", "build", "-o", driver, "./test/images/csi-hostpath")
	build.Dir = cfg.RepoDir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the driver: %v\n%s", err, out)
	}
	return cfg, driver
}

// workDir makes a directory for one driver's socket, state, staging and targets, and
// removes it when the test ends, after taking down any mount or loop device a failed run
// left under it (which the test has reported by then).
func workDir(t *testing.T) string {
	t.Helper()
	// A short path: a unix socket's path is limited to 107 bytes.
	dir, err := os.MkdirTemp("", "csisanity-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, m := range mountsUnder(t, dir) {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		for _, dev := range loopsUnder(t, dir) {
			detachLoop(dev)
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// driverProc is a running driver binary.
type driverProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	sock   string
	log    *framework.SyncBuffer
	done   chan error
	exited bool
}

// startDriver runs the driver on <dir>/csi.sock with its state in <dir>/state, and waits
// for its socket. It is stopped when the test ends, and its log shown if the test failed.
func startDriver(t *testing.T, bin, dir string, args ...string) *driverProc {
	t.Helper()
	p := &driverProc{t: t, sock: filepath.Join(dir, "csi.sock"), log: &framework.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{
		"--endpoint=unix://" + p.sock, "--nodeid=sanity-node", "--statedir=" + filepath.Join(dir, "state"), "--v=2",
	}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	_ = os.Remove(p.sock) // a socket left by a stopped driver must not count as ready
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("driver log (pid %d):\n%s", p.cmd.Process.Pid, tailOf(p.log.String(), 20000))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, err := os.Stat(p.sock); err == nil && st.Mode()&os.ModeSocket != 0 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("driver socket %s did not appear in 30s", p.sock)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM to the driver's pid and waits for it to exit cleanly.
func (p *driverProc) stop() {
	if p.exited {
		return
	}
	p.exited = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Errorf("driver exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("driver (pid %d) did not stop on SIGTERM", p.cmd.Process.Pid)
	}
}

// checkNothingLeft fails the test for every mount and loop device under dir.
func checkNothingLeft(t *testing.T, dir string) {
	t.Helper()
	if left := mountsUnder(t, dir); len(left) > 0 {
		t.Errorf("mounts left under %s: %v", dir, left)
	}
	if left := loopsUnder(t, dir); len(left) > 0 {
		t.Errorf("loop devices left bound to files under %s: %v", dir, left)
	}
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
