package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// standin is the built program: the tests run it as kubeadm does, so that
// the supervisor really outlives the command that started it.
var standin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "systemctl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	standin = filepath.Join(dir, "systemctl")
	build := exec.Command("go", "build", "-o", standin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build the stand-in:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixture is a unit directory and a state directory of one test.
type fixture struct {
	t     *testing.T
	units string
	state string
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, units: t.TempDir(), state: t.TempDir()}
}

// unit writes a unit file and makes sure the test leaves none of its
// processes behind.
func (f *fixture) unit(name, text string) {
	writeFile(f.t, filepath.Join(f.units, name), text)
	f.t.Cleanup(func() {
		f.run("stop", name)
		// Should stop fail, the service dies with its supervisor.
		if pid, err := readPID(filepath.Join(f.state, name+".pid")); err == nil && isSupervisor(pid, name) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// run runs the stand-in with output captured through pipes, as kubeadm
// does: a supervisor holding on to them would leave the caller waiting.
func (f *fixture) run(args ...string) (stdout, stderr string, code int) {
	f.t.Helper()
	cmd := exec.Command(standin, args...)
	cmd.Env = append(os.Environ(), unitPathEnv+"="+f.units, stateDirEnv+"="+f.state)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case errors.Is(err, exec.ErrWaitDelay):
		f.t.Fatalf("systemctl %s: its output pipes stayed open after it ended", strings.Join(args, " "))
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		f.t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// mustRun runs the stand-in and wants exit code want.
func (f *fixture) mustRun(want int, args ...string) string {
	f.t.Helper()
	stdout, stderr, code := f.run(args...)
	if code != want {
		f.t.Fatalf("systemctl %s: exit %d, want %d\nstdout: %s\nstderr: %s\nlog: %s",
			strings.Join(args, " "), code, want, stdout, stderr, f.log(args[len(args)-1]))
	}
	return stdout
}

func (f *fixture) log(name string) string {
	raw, _ := os.ReadFile(filepath.Join(f.state, unitName(name)+".log"))
	return string(raw)
}

// pid reads a state file's pid, waiting until it is there.
func (f *fixture) pid(name, kind string) int {
	f.t.Helper()
	var pid int
	waitFor(f.t, name+"."+kind, func() bool {
		var err error
		pid, err = readPID(filepath.Join(f.state, name+"."+kind))
		return err == nil
	})
	return pid
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gone says whether a process has ended (a zombie has).
func gone(pid int) bool {
	state, _, err := procStat(pid)
	return err != nil || state == 'Z'
}

func countLines(path string) int {
	raw, _ := os.ReadFile(path)
	return strings.Count(string(raw), "\n")
}

func TestStartRestartStop(t *testing.T) {
	f := newFixture(t)
	runs := filepath.Join(t.TempDir(), "runs")
	f.unit("sleeper.service", fmt.Sprintf(`[Unit]
Description=Sleeps a while
[Service]
ExecStart=/bin/sh -c 'echo started >> %s; exec sleep 600'
Restart=always
RestartSec=100ms
TimeoutStopSec=5s
`, runs))

	f.mustRun(exitOK, "start", "sleeper")
	if out := f.mustRun(exitOK, "is-active", "sleeper"); out != "active\n" {
		t.Errorf("is-active printed %q", out)
	}
	waitFor(t, "the first run", func() bool { return countLines(runs) == 1 })
	f.mustRun(exitOK, "start", "sleeper") // a second start finds it running
	supervisor, first := f.pid("sleeper.service", "pid"), f.pid("sleeper.service", "mainpid")

	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run after a kill", func() bool { return countLines(runs) == 2 })
	var second int
	waitFor(t, "a new main pid", func() bool {
		second = f.pid("sleeper.service", "mainpid")
		return second != first
	})
	if f.pid("sleeper.service", "pid") != supervisor {
		t.Error("the supervisor changed: it should have restarted the service itself")
	}

	status := f.mustRun(exitOK, "status", "--no-pager", "sleeper")
	for _, want := range []string{
		"● sleeper.service - Sleeps a while",
		"Loaded: loaded (" + filepath.Join(f.units, "sleeper.service") + "; disabled; preset: enabled)",
		"Active: active (running) since ",
		fmt.Sprintf("Main PID: %d (", second), // sh or, once it has exec'd, sleep
	} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q:\n%s", want, status)
		}
	}

	f.mustRun(exitOK, "restart", "sleeper")
	waitFor(t, "the run after restart", func() bool { return countLines(runs) == 3 })
	if !gone(supervisor) || !gone(second) {
		t.Errorf("restart left the old supervisor %d or service %d running", supervisor, second)
	}
	supervisor, third := f.pid("sleeper.service", "pid"), f.pid("sleeper.service", "mainpid")

	f.mustRun(exitOK, "stop", "sleeper")
	if out := f.mustRun(exitNotActive, "is-active", "sleeper"); out != "inactive\n" {
		t.Errorf("is-active printed %q", out)
	}
	if !gone(supervisor) || !gone(third) {
		t.Errorf("stop left the supervisor %d or service %d running", supervisor, third)
	}
	f.mustRun(exitNotActive, "status", "sleeper")
	f.mustRun(exitOK, "stop", "sleeper") // stopping a stopped unit is fine
	if log := f.log("sleeper"); !strings.Contains(log, "started process") || !strings.Contains(log, "restart requested") {
		t.Errorf("the log lacks events:\n%s", log)
	}
}

func TestServiceGetsUnitEnvironment(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	envFile := writeFile(t, filepath.Join(dir, "env"), "B='from file'\nC=file\n")
	f.unit("env.service", fmt.Sprintf(`[Service]
Environment="A=from unit" C=unit
EnvironmentFile=%s
ExecStart=/bin/sh -c 'echo "$$A|$$B|$$C|$$0" > %s; exec sleep 600' ${B}
`, envFile, out))

	f.mustRun(exitOK, "start", "env")
	waitFor(t, "the service's output", func() bool { return countLines(out) == 1 })
	raw, _ := os.ReadFile(out)
	if got, want := string(raw), "from unit|from file|file|from file\n"; got != want {
		t.Errorf("service saw %q, want %q", got, want)
	}
}

func TestStopKillsAServiceThatIgnoresSIGTERM(t *testing.T) {
	f := newFixture(t)
	runs := filepath.Join(t.TempDir(), "runs")
	f.unit("stubborn.service", fmt.Sprintf(`[Service]
ExecStart=/bin/sh -c 'trap "" TERM; echo started >> %s; while :; do sleep 1; done'
TimeoutStopSec=300ms
`, runs))

	f.mustRun(exitOK, "start", "stubborn")
	waitFor(t, "the trap to be set", func() bool { return countLines(runs) == 1 })
	supervisor, service := f.pid("stubborn.service", "pid"), f.pid("stubborn.service", "mainpid")
	f.mustRun(exitOK, "stop", "stubborn")
	if !gone(supervisor) || !gone(service) {
		t.Errorf("stop left the supervisor %d or service %d running", supervisor, service)
	}
}

func TestStartReportsAFailedExec(t *testing.T) {
	f := newFixture(t)
	f.unit("broken.service", "[Service]\nExecStart=/nonexistent/program\nRestart=always\n")

	_, stderr, code := f.run("start", "broken")
	if code != exitFailed || !strings.Contains(stderr, "no such file or directory") {
		t.Errorf("start: exit %d, stderr %q", code, stderr)
	}
	f.mustRun(exitNotActive, "is-active", "broken")
}

func TestStartSkipsAUnitWhoseConditionFails(t *testing.T) {
	f := newFixture(t)
	f.unit("cond.service", fmt.Sprintf("[Unit]\nConditionPathExists=%s\n[Service]\nExecStart=/bin/sleep 600\n",
		filepath.Join(t.TempDir(), "missing")))

	f.mustRun(exitOK, "start", "cond")
	f.mustRun(exitNotActive, "is-active", "cond")
	if _, err := os.Stat(filepath.Join(f.state, "cond.service.pid")); err == nil {
		t.Error("a supervisor was started")
	}
}

func TestEnableDisable(t *testing.T) {
	f := newFixture(t)
	f.unit("svc.service", "[Service]\nExecStart=/bin/sleep 600\n")

	if out := f.mustRun(exitFailed, "is-enabled", "svc"); out != "disabled\n" {
		t.Errorf("is-enabled printed %q", out)
	}
	f.mustRun(exitOK, "enable", "svc")
	if out := f.mustRun(exitOK, "is-enabled", "svc.service"); out != "enabled\n" {
		t.Errorf("is-enabled printed %q", out)
	}
	if out := f.mustRun(exitOK, "-q", "is-enabled", "svc"); out != "" {
		t.Errorf("is-enabled -q printed %q", out)
	}
	f.mustRun(exitNotActive, "is-active", "svc") // enable alone does not start
	f.mustRun(exitOK, "disable", "svc")
	f.mustRun(exitFailed, "is-enabled", "svc")

	f.mustRun(exitOK, "enable", "--now", "svc")
	f.mustRun(exitOK, "is-active", "svc")
	f.mustRun(exitOK, "disable", "--now", "svc")
	f.mustRun(exitNotActive, "is-active", "svc")
}

func TestMissingUnitCommands(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		args       []string
		code       int
		stdout     string
		stderrHas  string
		stdoutLack string
	}{
		{args: []string{"status", "nope"}, code: exitNoUnit, stderrHas: "Unit nope.service could not be found."},
		{args: []string{"start", "nope"}, code: exitNotFound, stderrHas: "Failed to start nope.service: Unit nope.service not found."},
		{args: []string{"restart", "nope"}, code: exitNotFound, stderrHas: "Unit nope.service not found."},
		{args: []string{"is-enabled", "nope"}, code: exitFailed, stderrHas: "Failed to get unit file state for nope.service: No such file or directory"},
		{args: []string{"enable", "nope"}, code: exitFailed, stderrHas: "Unit file nope.service does not exist."},
		{args: []string{"is-active", "systemd-resolved"}, code: exitNotActive, stdout: "inactive\n"},
		{args: []string{"daemon-reload"}, code: exitOK},
		{args: []string{"frobnicate", "nope"}, code: exitFailed, stderrHas: "Unknown command verb"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			stdout, stderr, code := f.run(tt.args...)
			if code != tt.code || stdout != tt.stdout || !strings.Contains(stderr, tt.stderrHas) {
				t.Errorf("exit %d stdout %q stderr %q, want exit %d stdout %q stderr with %q",
					code, stdout, stderr, tt.code, tt.stdout, tt.stderrHas)
			}
		})
	}
}

func TestKilledSupervisorTakesItsServiceAlong(t *testing.T) {
	f := newFixture(t)
	f.unit("orphan.service", "[Service]\nExecStart=/bin/sleep 600\nRestart=always\n")

	f.mustRun(exitOK, "start", "orphan")
	supervisor, service := f.pid("orphan.service", "pid"), f.pid("orphan.service", "mainpid")
	if err := syscall.Kill(supervisor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the service to die with its supervisor", func() bool { return gone(service) })
	f.mustRun(exitNotActive, "is-active", "orphan") // its pid file is left, naming a dead process
	f.mustRun(exitOK, "start", "orphan")
	f.mustRun(exitOK, "is-active", "orphan")
}
