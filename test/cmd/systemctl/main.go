// Command systemctl stands in for systemd's systemctl on test machines where
// systemd is not PID 1. kubeadm starts, stops and asks after "the kubelet"
// through systemctl; put first on PATH, this runs nodeagent from the unit
// files an operator installs (manifests/), unchanged.
//
//	systemctl [--no-pager] [-q|--quiet] COMMAND [--now] UNIT...
//
// Commands: daemon-reload (nothing to do: units are read at every command),
// start, stop, restart, try-restart, enable [--now], disable [--now],
// is-enabled, is-active and status. Exit codes are systemctl's: 0 done,
// 1 failed, 3 not active, 4 no such unit (status), 5 no such unit (start,
// stop, restart).
//
// Units are NAME.service files found on $SYSTEMCTL_UNIT_PATH (default
// /etc/systemd/system:/lib/systemd/system) with their NAME.service.d/*.conf
// drop-ins; unit.go says which settings count. A started unit gets a
// supervisor, this program again under a hidden command, detached from the
// caller: it runs the service, restarts it as Restart= says and stops it on
// SIGTERM. $SYSTEMCTL_STATE_DIR (default /run/systemctl-standin) holds per
// unit: UNIT.pid (the supervisor), UNIT.mainpid (the service), UNIT.log (the
// service's output and the supervisor's events) and UNIT.enabled.
//
// Not systemd: there are no dependencies or ordering (Wants=, After= are
// ignored), no cgroups (a stop signals the service's process group), no
// specifiers (%n) and no journal (status names the log file instead).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exit codes, as systemctl uses them.
const (
	exitOK        = 0
	exitFailed    = 1
	exitNotActive = 3
	exitNoUnit    = 4 // status of a unit that is not there
	exitNotFound  = 5 // start, stop or restart of a unit that is not there
)

const (
	unitPathEnv     = "SYSTEMCTL_UNIT_PATH"
	stateDirEnv     = "SYSTEMCTL_STATE_DIR"
	defaultUnitPath = "/etc/systemd/system:/lib/systemd/system"
	defaultStateDir = "/run/systemctl-standin"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == superviseCmd {
		os.Exit(newCtl(os.Stdout, os.Stderr).supervise(os.Args[2]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// ctl carries what every command needs: where units and state are, the
// options given and where output goes.
type ctl struct {
	unitPath []string
	stateDir string
	quiet    bool // -q: is-active and is-enabled print nothing
	now      bool // --now: enable also starts, disable also stops
	stdout   io.Writer
	stderr   io.Writer
}

func newCtl(stdout, stderr io.Writer) *ctl {
	c := &ctl{unitPath: filepath.SplitList(defaultUnitPath), stateDir: defaultStateDir, stdout: stdout, stderr: stderr}
	if p := os.Getenv(unitPathEnv); p != "" {
		c.unitPath = filepath.SplitList(p)
	}
	if d := os.Getenv(stateDirEnv); d != "" {
		c.stateDir = d
	}
	return c
}

// commands maps a verb to what it does to one unit; the worst exit code of
// the units is the command's.
var commands = map[string]func(c *ctl, name string) int{
	"start":       (*ctl).start,
	"stop":        (*ctl).stop,
	"restart":     (*ctl).restart,
	"try-restart": (*ctl).tryRestart,
	"enable":      (*ctl).enable,
	"disable":     (*ctl).disable,
	"is-enabled":  (*ctl).isEnabled,
	"is-active":   (*ctl).isActive,
	"status":      (*ctl).status,
}

// run parses the command line and runs the command on each unit named.
func run(args []string, stdout, stderr io.Writer) int {
	c := newCtl(stdout, stderr)
	var verb string
	var units []string
	for _, a := range args {
		switch {
		case a == "--no-pager" || a == "--system" || a == "--no-block" || a == "-l" || a == "--full":
		case a == "-q" || a == "--quiet":
			c.quiet = true
		case a == "--now":
			c.now = true
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(stderr, "systemctl: unrecognized option '%s'\n", a)
			return exitFailed
		case verb == "":
			verb = a
		default:
			units = append(units, unitName(a))
		}
	}
	if verb == "daemon-reload" {
		return exitOK
	}
	cmd, ok := commands[verb]
	if !ok {
		fmt.Fprintf(stderr, "Unknown command verb '%s'.\n", verb)
		return exitFailed
	}
	if len(units) == 0 {
		fmt.Fprintln(stderr, "Too few arguments.")
		return exitFailed
	}
	code := exitOK
	for _, name := range units {
		if r := cmd(c, name); r != exitOK {
			code = r
		}
	}
	return code
}

// statePath is where the unit's state file of the given kind lives.
func (c *ctl) statePath(name, kind string) string {
	return filepath.Join(c.stateDir, name+"."+kind)
}

func (c *ctl) start(name string) int {
	defer c.lock(name)()
	return c.startLocked(name, "start")
}

func (c *ctl) stop(name string) int {
	defer c.lock(name)()
	return c.stopLocked(name, "stop")
}

func (c *ctl) restart(name string) int {
	defer c.lock(name)()
	if code := c.stopLocked(name, "restart"); code != exitOK {
		return code
	}
	c.logEvent(name, "restart requested")
	return c.startLocked(name, "restart")
}

func (c *ctl) tryRestart(name string) int {
	if _, running := c.supervisorPID(name); !running {
		return exitOK
	}
	return c.restart(name)
}

// startLocked starts the unit's supervisor unless it runs already or a
// condition of the unit does not hold (a skipped start is a success, as in
// systemd).
func (c *ctl) startLocked(name, verb string) int {
	u, err := loadUnit(c.unitPath, name)
	if errors.Is(err, errNoUnit) {
		fmt.Fprintf(c.stderr, "Failed to %s %s: Unit %s not found.\n", verb, name, name)
		return exitNotFound
	}
	if err == nil {
		if _, running := c.supervisorPID(name); running {
			return exitOK
		}
		if ok, failed := u.conditionsHold(); !ok {
			c.logEvent(name, "start skipped: %s does not hold", failed)
			return exitOK
		}
		_, err = u.command(os.Environ()) // fail here rather than in the supervisor's log
	}
	if err == nil {
		err = c.spawnSupervisor(name)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "Failed to %s %s: %v\nSee %s for details.\n", verb, name, err, c.statePath(name, "log"))
		return exitFailed
	}
	return exitOK
}

// stopLocked has the supervisor stop the service and waits for it to end,
// killing it if it does not end by the unit's stop timeout and a margin.
func (c *ctl) stopLocked(name, verb string) int {
	pid, running := c.supervisorPID(name)
	u, err := loadUnit(c.unitPath, name)
	if !running {
		c.removeState(name)
		if errors.Is(err, errNoUnit) {
			why := "not found" // systemctl's words differ between stop and restart
			if verb == "stop" {
				why = "not loaded"
			}
			fmt.Fprintf(c.stderr, "Failed to %s %s: Unit %s %s.\n", verb, name, name, why)
			return exitNotFound
		}
		return exitOK
	}
	timeout := defaultStopTimeout
	if err == nil { // a unit whose file went away can still be stopped
		timeout = u.stopTimeout
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if !c.waitGone(pid, name, time.Now().Add(timeout+5*time.Second)) {
		// The service dies with it: it has the SIGKILL parent-death signal.
		_ = syscall.Kill(pid, syscall.SIGKILL)
		c.waitGone(pid, name, time.Now().Add(5*time.Second))
		c.logEvent(name, "supervisor %d did not end in time; killed", pid)
	}
	c.removeState(name)
	return exitOK
}

// waitGone polls until the supervisor pid has ended or the deadline passes.
func (c *ctl) waitGone(pid int, name string, deadline time.Time) bool {
	for isSupervisor(pid, name) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func (c *ctl) enable(name string) int {
	if _, err := findUnitFile(c.unitPath, name); err != nil {
		fmt.Fprintf(c.stderr, "Failed to enable unit: Unit file %s does not exist.\n", name)
		return exitFailed
	}
	err := os.MkdirAll(c.stateDir, 0o755)
	if err == nil {
		err = os.WriteFile(c.statePath(name, "enabled"), []byte("enabled\n"), 0o644)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "Failed to enable unit: %v\n", err)
		return exitFailed
	}
	if c.now {
		return c.start(name)
	}
	return exitOK
}

func (c *ctl) disable(name string) int {
	if _, err := findUnitFile(c.unitPath, name); err != nil {
		fmt.Fprintf(c.stderr, "Failed to disable unit: Unit file %s does not exist.\n", name)
		return exitFailed
	}
	if err := os.Remove(c.statePath(name, "enabled")); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(c.stderr, "Failed to disable unit: %v\n", err)
		return exitFailed
	}
	if c.now {
		return c.stop(name)
	}
	return exitOK
}

func (c *ctl) isEnabled(name string) int {
	if _, err := findUnitFile(c.unitPath, name); err != nil {
		fmt.Fprintf(c.stderr, "Failed to get unit file state for %s: No such file or directory\n", name)
		return exitFailed
	}
	state, code := "disabled", exitFailed
	if c.enabled(name) {
		state, code = "enabled", exitOK
	}
	if !c.quiet {
		fmt.Fprintln(c.stdout, state)
	}
	return code
}

func (c *ctl) enabled(name string) bool {
	_, err := os.Stat(c.statePath(name, "enabled"))
	return err == nil
}

// isActive says active while the unit's supervisor runs, also between two
// runs of a service that Restart= brings back.
func (c *ctl) isActive(name string) int {
	state, code := "inactive", exitNotActive
	if _, running := c.supervisorPID(name); running {
		state, code = "active", exitOK
	}
	if !c.quiet {
		fmt.Fprintln(c.stdout, state)
	}
	return code
}

func (c *ctl) status(name string) int {
	u, err := loadUnit(c.unitPath, name)
	if errors.Is(err, errNoUnit) {
		fmt.Fprintf(c.stderr, "Unit %s could not be found.\n", name)
		return exitNoUnit
	}
	if err != nil {
		fmt.Fprintf(c.stdout, "● %s\n     Loaded: error (Reason: %v)\n     Active: inactive (dead)\n", name, err)
		return exitNotActive
	}
	title := name
	if u.description != "" {
		title += " - " + u.description
	}
	enabled := "disabled"
	if c.enabled(name) {
		enabled = "enabled"
	}
	fmt.Fprintf(c.stdout, "● %s\n     Loaded: loaded (%s; %s; preset: enabled)\n", title, u.path, enabled)
	lastDir := ""
	for _, d := range u.dropIns {
		if dir := filepath.Dir(d); dir != lastDir {
			label := "    Drop-In: "
			if lastDir != "" {
				label = "             "
			}
			fmt.Fprintf(c.stdout, "%s%s\n", label, dir)
			lastDir = dir
		}
		fmt.Fprintf(c.stdout, "             └─%s\n", filepath.Base(d))
	}
	code := c.printActive(name)
	if _, err := os.Stat(c.statePath(name, "log")); err == nil {
		fmt.Fprintf(c.stdout, "        Log: %s\n", c.statePath(name, "log"))
	}
	return code
}

// printActive prints the Active: and Main PID: lines of status.
func (c *ctl) printActive(name string) int {
	if _, running := c.supervisorPID(name); !running {
		fmt.Fprintln(c.stdout, "     Active: inactive (dead)")
		return exitNotActive
	}
	pid, ok := c.mainPID(name)
	if !ok {
		fmt.Fprintln(c.stdout, "     Active: activating (auto-restart)")
		return exitOK
	}
	since := "?"
	if fi, err := os.Stat(c.statePath(name, "mainpid")); err == nil {
		t := fi.ModTime()
		since = fmt.Sprintf("%s; %s ago", t.Format("Mon 2006-01-02 15:04:05 MST"), time.Since(t).Round(time.Second))
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	fmt.Fprintf(c.stdout, "     Active: active (running) since %s\n   Main PID: %d (%s)\n", since, pid, strings.TrimSpace(string(comm)))
	return exitOK
}

// supervisorPID returns the pid of the unit's supervisor if it runs.
func (c *ctl) supervisorPID(name string) (int, bool) {
	pid, err := readPID(c.statePath(name, "pid"))
	if err != nil || !isSupervisor(pid, name) {
		return 0, false
	}
	return pid, true
}

// mainPID returns the pid of the unit's service if it runs: a child of the
// running supervisor, so a reused pid is not taken for it.
func (c *ctl) mainPID(name string) (int, bool) {
	sup, running := c.supervisorPID(name)
	pid, err := readPID(c.statePath(name, "mainpid"))
	if !running || err != nil {
		return 0, false
	}
	state, ppid, err := procStat(pid)
	return pid, err == nil && state != 'Z' && ppid == sup
}

// isSupervisor says whether pid is alive and is the supervisor of the unit:
// a pid file can outlive its process and the pid be reused. A zombie has an
// empty command line, so an ended supervisor not yet reaped does not count.
func isSupervisor(pid int, name string) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(raw), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == superviseCmd && args[i+1] == name {
			return true
		}
	}
	return false
}

// procStat returns a process's state letter and parent pid.
func procStat(pid int) (byte, int, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(fields) < 2 {
		return 0, 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ppid, err := strconv.Atoi(fields[1])
	return fields[0][0], ppid, err
}

func readPID(path string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

// removeState removes what a supervisor that is gone may have left behind.
func (c *ctl) removeState(name string) {
	for _, kind := range []string{"pid", "mainpid"} {
		_ = os.Remove(c.statePath(name, kind))
	}
}

// lock serializes start, stop and restart of one unit, so that two callers
// cannot start two supervisors; it returns the unlock. The lock is an flock,
// released by the kernel if the command dies.
func (c *ctl) lock(name string) func() {
	if err := os.MkdirAll(c.stateDir, 0o755); err != nil {
		return func() {}
	}
	f, err := os.OpenFile(c.statePath(name, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return func() {}
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	return func() { f.Close() }
}

// logEvent appends a line about the unit to its log.
func (c *ctl) logEvent(name, format string, args ...any) {
	if err := os.MkdirAll(c.stateDir, 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(c.statePath(name, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	writeEvent(f, name, format, args...)
}

// writeEvent writes one timestamped event line.
func writeEvent(w io.Writer, name, format string, args ...any) {
	fmt.Fprintf(w, "%s systemctl: %s: %s\n", time.Now().Format("2006-01-02T15:04:05.000Z07:00"), name, fmt.Sprintf(format, args...))
}
