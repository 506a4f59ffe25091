//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
)

// kubectlProc is a kubectl running beside the test (logs -f, attach, port-forward, a
// terminal session): its output is collected as it comes, and it is killed when the test
// ends.
type kubectlProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser        // nil unless asked for; the terminal with a pty
	out    *framework.SyncBuffer // stdout, or everything the terminal showed
	errOut *framework.SyncBuffer
	done   chan struct{}
	err    error // set before done closes
	// copied closes once a terminal's output is all in out (the master
	// reads EIO when kubectl, its only holder, is gone); nil with pipes,
	// which cmd.Wait drains itself.
	copied chan struct{}
}

// startKubectl starts kubectl with its stdout collected; with withStdin its stdin is a pipe
// the test writes to.
func startKubectl(t *testing.T, withStdin bool, args ...string) *kubectlProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := framework.KubectlCommand(t, ctx, args...)
	p := &kubectlProc{cmd: cmd, out: &framework.SyncBuffer{}, errOut: &framework.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.errOut
	if withStdin {
		w, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.stdin = w
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start kubectl %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// startKubectlTerminal starts kubectl on a new pseudo-terminal of rows×cols, as a user at a
// terminal runs it: stdin, stdout and stderr are the terminal, which is its controlling
// one. p.stdin types into it and p.out is what it showed.
func startKubectlTerminal(t *testing.T, rows, cols uint16, args ...string) *kubectlProc {
	t.Helper()
	master, tty := openPTY(t, rows, cols)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := framework.KubectlCommand(t, ctx, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	p := &kubectlProc{cmd: cmd, stdin: master, out: &framework.SyncBuffer{}, errOut: &framework.SyncBuffer{}, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start kubectl %s: %v", strings.Join(args, " "), err)
	}
	// Only kubectl holds the terminal now: the master reads EIO once it is gone.
	tty.Close()
	copied := make(chan struct{})
	p.copied = copied
	go func() {
		_, _ = io.Copy(p.out, master)
		close(copied)
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
		master.Close()
		<-copied
	})
	return p
}

// openPTY opens a pseudo-terminal pair with the given window size.
func openPTY(t *testing.T, rows, cols uint16) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	// Through SyscallConn, not Fd: the master stays non-blocking, so that closing it ends a
	// read in progress.
	rc, err := master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		if ioctlErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioctlErr == nil {
			n, ioctlErr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}); err != nil || ioctlErr != nil {
		t.Fatalf("set up pty: %v %v", err, ioctlErr)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatalf("set pty size: %v", err)
	}
	return master, tty
}

// waitOutput polls until cond accepts the output so far, and returns it. kubectl exiting
// first fails the test.
func (p *kubectlProc) waitOutput(t *testing.T, timeout time.Duration, what string, cond func(out string) bool) string {
	t.Helper()
	var out string
	framework.Eventually(t, timeout, func() error {
		out = p.out.String()
		if cond(out) {
			return nil
		}
		if p.exited() {
			t.Fatalf("kubectl %s exited (%v) before %s; output %q, stderr %q", p.args(), p.err, what, out, p.errOut.String())
		}
		return fmt.Errorf("kubectl %s: no %s yet in %q (stderr %q)", p.args(), what, tail(out, 500), p.errOut.String())
	})
	return out
}

// wait waits for kubectl to exit by itself and returns its exit code.
func (p *kubectlProc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("kubectl %s still runs after %s; output %q, stderr %q", p.args(), timeout, tail(p.out.String(), 500), p.errOut.String())
	}
	if p.copied != nil {
		// kubectl is gone but what it wrote to the terminal may still be
		// on its way to out: what follows reads it.
		select {
		case <-p.copied:
		case <-time.After(timeout):
			t.Fatalf("the output of kubectl %s was not all read %s after it exited", p.args(), timeout)
		}
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("kubectl %s: %v", p.args(), p.err)
	}
	return 0
}

func (p *kubectlProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *kubectlProc) args() string { return strings.Join(p.cmd.Args[1:], " ") }

// tail is the end of s, for messages.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// kubectlExitCode runs kubectl to its end and returns its stdout, stderr and exit code.
func kubectlExitCode(t *testing.T, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := framework.KubectlCommand(t, ctx, args...)
	cmd.Stdin = stdin
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), 0
}
