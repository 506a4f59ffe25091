package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// superviseCmd is the hidden command that makes the program a unit's
// supervisor; is-active looks for it in a process's command line.
const superviseCmd = "__supervise"

// readyFD is the supervisor's end of the pipe on which it tells start
// whether the service's first run began: "ok" or the reason it did not.
const readyFD = 3

// startDeadline bounds how long start waits for that word.
const startDeadline = 10 * time.Second

// spawnSupervisor starts the unit's supervisor detached from the caller (its
// own session, output to the unit's log) and returns once the supervisor
// reports the service started, or why it could not.
func (c *ctl) spawnSupervisor(name string) error {
	if err := os.MkdirAll(c.stateDir, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(c.statePath(name, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devNull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	// The supervisor outlives this command. Whatever else it inherited, such
	// as a pipe our caller reads to its end, would keep that caller waiting.
	closeOnExecAll()
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{os.Args[0], superviseCmd, name},
		Env:         append(os.Environ(), c.absEnv()...),
		Dir:         "/",
		Stdin:       devNull,
		Stdout:      logFile,
		Stderr:      logFile,
		ExtraFiles:  []*os.File{w},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("start supervisor: %w", err)
	}
	if err := awaitReady(r); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		c.removeState(name)
		return err
	}
	return cmd.Process.Release()
}

// absEnv passes the unit path and state dir on as absolute paths, since the
// supervisor runs in /.
func (c *ctl) absEnv() []string {
	dirs := make([]string, len(c.unitPath))
	for i, d := range c.unitPath {
		dirs[i], _ = filepath.Abs(d)
	}
	state, _ := filepath.Abs(c.stateDir)
	return []string{unitPathEnv + "=" + strings.Join(dirs, ":"), stateDirEnv + "=" + state}
}

// closeOnExecAll marks every descriptor but stdin, stdout and stderr to be
// closed in the programs this process starts.
func closeOnExecAll() {
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// awaitReady reads the supervisor's word on the service's first start.
func awaitReady(r *os.File) error {
	_ = r.SetReadDeadline(time.Now().Add(startDeadline))
	msg, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("supervisor did not report within %s: %w", startDeadline, err)
	}
	switch s := strings.TrimSpace(string(msg)); s {
	case "ok":
		return nil
	case "":
		return errors.New("supervisor ended before starting the service")
	default:
		return errors.New(s)
	}
}

// supervise runs the unit's service until SIGTERM, starting it again as the
// unit's Restart= says. The unit is read again before each start, as
// systemd reads its environment files again (daemon-reload is implied).
func (c *ctl) supervise(name string) int {
	// The parent-death signal is tied to the thread that starts the service:
	// every start happens on this one, which lives as long as the process.
	runtime.LockOSThread()
	ready := os.NewFile(readyFD, "ready")
	syscall.CloseOnExec(readyFD)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	pidPath := c.statePath(name, "pid")
	if err := writePID(pidPath, os.Getpid()); err != nil {
		report(ready, err)
		return exitFailed
	}
	defer removeIfOwn(pidPath, os.Getpid())
	for run := 1; ; run++ {
		u, svc, err := c.startService(name, run > 1)
		if err != nil {
			writeEvent(os.Stderr, name, "start failed: %v", err)
		}
		if run == 1 {
			report(ready, err)
			if err != nil {
				return exitFailed
			}
		}
		if u == nil || errors.Is(err, errCondition) { // gone, unreadable or skipped
			writeEvent(os.Stderr, name, "not started again")
			return exitOK
		}
		result := err
		if err == nil {
			var stopped bool
			if stopped, result = svc.await(c, name, u.stopTimeout, stop); stopped {
				return exitOK
			}
		}
		if !shouldRestart(u.restart, result) {
			writeEvent(os.Stderr, name, "not restarting (Restart=%s)", u.restart)
			return exitOK
		}
		writeEvent(os.Stderr, name, "restarting in %s", u.restartSec)
		select {
		case <-stop:
			writeEvent(os.Stderr, name, "stopped")
			return exitOK
		case <-time.After(u.restartSec):
		}
	}
}

// shouldRestart decides from Restart= and how the run ended (nil: exit 0)
// whether the service runs again.
func shouldRestart(policy string, result error) bool {
	switch policy {
	case "always":
		return true
	case "on-failure":
		return result != nil
	}
	return false
}

// report tells the waiting start command how the first start went.
func report(ready *os.File, err error) {
	msg := "ok"
	if err != nil {
		msg = err.Error()
	}
	_, _ = ready.WriteString(msg + "\n")
	ready.Close()
}

// errCondition is returned for a restart skipped by a failing condition.
var errCondition = errors.New("condition failed")

// service is one run of a unit's command.
type service struct {
	cmd           *exec.Cmd
	done          chan error // receives the run's end
	ignoreFailure bool
}

// startService reads the unit and starts its command. Conditions are
// checked on restarts; the start command checked them for the first run.
func (c *ctl) startService(name string, checkConditions bool) (*unit, *service, error) {
	u, err := loadUnit(c.unitPath, name)
	if err != nil {
		return nil, nil, err
	}
	if ok, failed := u.conditionsHold(); checkConditions && !ok {
		return u, nil, fmt.Errorf("%w: %s", errCondition, failed)
	}
	spec, err := u.command(os.Environ())
	if err != nil {
		return u, nil, err
	}
	cmd := &exec.Cmd{
		Path:   spec.path,
		Args:   spec.args,
		Env:    spec.env,
		Dir:    "/",
		Stdout: os.Stdout, // the unit's log
		Stderr: os.Stderr,
		// Its own process group lets a stop reach what the service started;
		// the parent-death signal ends it should the supervisor be killed.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	if err := cmd.Start(); err != nil {
		return u, nil, err
	}
	_ = writePID(c.statePath(name, "mainpid"), cmd.Process.Pid)
	writeEvent(os.Stderr, name, "started process %d: %s", cmd.Process.Pid, strings.Join(spec.args, " "))
	svc := &service{cmd: cmd, done: make(chan error, 1), ignoreFailure: spec.ignoreFailure}
	go func() { svc.done <- cmd.Wait() }()
	return u, svc, nil
}

func (s *service) pid() int { return s.cmd.Process.Pid }

// await waits for the run to end, or stops it when asked. It says whether
// it stopped the run and how the run ended, nil standing for success.
func (s *service) await(c *ctl, name string, stopTimeout time.Duration, stop <-chan os.Signal) (bool, error) {
	select {
	case <-stop:
		writeEvent(os.Stderr, name, "stopping process %d", s.pid())
		s.ended(c, name, s.stop(stopTimeout))
		writeEvent(os.Stderr, name, "stopped")
		return true, nil
	case result := <-s.done:
		s.ended(c, name, result)
		if s.ignoreFailure {
			return false, nil
		}
		return false, result
	}
}

// stop ends the run: SIGTERM to the service's process group, SIGKILL if it
// has not ended within timeout.
func (s *service) stop(timeout time.Duration) error {
	_ = syscall.Kill(-s.pid(), syscall.SIGTERM)
	_ = s.cmd.Process.Signal(syscall.SIGTERM) // in case it left its group
	select {
	case err := <-s.done:
		return err
	case <-time.After(timeout):
	}
	_ = syscall.Kill(-s.pid(), syscall.SIGKILL)
	_ = s.cmd.Process.Kill()
	return <-s.done
}

// ended clears up after a run: what the service left in its process group
// is killed, as systemd ends what is left of a unit, and the main pid is no
// longer recorded.
func (s *service) ended(c *ctl, name string, result error) {
	_ = syscall.Kill(-s.pid(), syscall.SIGKILL)
	removeIfOwn(c.statePath(name, "mainpid"), s.pid())
	how := "exited 0"
	if result != nil {
		how = result.Error()
	}
	writeEvent(os.Stderr, name, "process %d ended: %s", s.pid(), how)
}

// writePID replaces the file in one step, so a reader never sees half a pid.
func writePID(path string, pid int) error {
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// removeIfOwn removes a pid file only if it still names pid: a newer
// supervisor or run may have written it since.
func removeIfOwn(path string, pid int) {
	if got, err := readPID(path); err == nil && got == pid {
		_ = os.Remove(path)
	}
}
