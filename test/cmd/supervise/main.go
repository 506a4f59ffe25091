// Command supervise runs a command and starts it again whenever it ends, as an init system
// or the node agent of a DaemonSet's pod would: the harness runs kube-proxy under it, and
// kube-proxy exits on purpose when its Node is deleted, counting on being restarted.
//
//	supervise COMMAND [ARG...]
//
// A command that ends within 10 seconds of its start waits before the next start, twice as
// long each time (1 s up to 30 s). SIGTERM and SIGINT go to the command, and supervise ends
// when it does. The command gets SIGKILL when supervise dies, so that a SIGKILL of
// supervise leaves no process behind.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

const (
	firstPause = time.Second
	maxPause   = 30 * time.Second
	steadyRun  = 10 * time.Second // a run this long resets the pause
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: supervise COMMAND [ARG...]")
		os.Exit(2)
	}
	// The parent-death signal follows the thread that started the child: keep every start
	// on the main thread, which lives as long as the process.
	runtime.LockOSThread()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	pause := firstPause
	for {
		cmd := exec.Command(os.Args[1], os.Args[2:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		started := time.Now()
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "supervise: %v\n", err)
			os.Exit(1)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
			os.Exit(exitCode(<-done))
		case err := <-done:
			if time.Since(started) >= steadyRun {
				pause = firstPause
			}
			fmt.Fprintf(os.Stderr, "supervise: %s ended after %s (%v); starting it again in %s\n",
				os.Args[1], time.Since(started).Round(time.Millisecond), err, pause)
		}
		select {
		case <-sigs:
			os.Exit(0)
		case <-time.After(pause):
		}
		pause = min(2*pause, maxPause)
	}
}

// exitCode is the code supervise ends with after the command ended with err.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ee.ExitCode() >= 0 {
			return ee.ExitCode()
		}
		return 0 // ended by the signal passed on: as asked
	}
	if err != nil {
		return 1
	}
	return 0
}
