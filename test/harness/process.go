package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pidRecord is what a pid file holds: enough to recognise the process again, so that a
// stale pid reused by an unrelated process is never signalled.
type pidRecord struct {
	Pid   int    `json:"pid"`
	Exe   string `json:"exe"`
	Start uint64 `json:"start"` // start time in clock ticks since boot (/proc/<pid>/stat field 22)
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func (c *Config) pidDir() string { return c.path("pids") }

// startDaemon starts bin with args in its own session, logging to logs/<name>.log, and
// records its pid. The daemon outlives the harness command; a goroutine reaps it if it exits
// while the caller still runs.
func (c *Config) startDaemon(name, bin string, args []string, env []string) (int, error) {
	return c.startDaemonAttr(name, bin, args, env, &syscall.SysProcAttr{Setsid: true})
}

// startDaemonAttr is startDaemon with the process attributes given (namespaces to make).
func (c *Config) startDaemonAttr(name, bin string, args, env []string, attr *syscall.SysProcAttr) (int, error) {
	for _, d := range []string{c.pidDir(), c.LogDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
	}
	logf, err := os.OpenFile(filepath.Join(c.LogDir(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = attr
	fmt.Fprintf(logf, "---- %s started by harness: %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", name, err)
	}
	exitFile := filepath.Join(c.pidDir(), name+".exit")
	_ = os.Remove(exitFile)
	go func() {
		// Reap it, and record how it ended for tests that stop a daemon on purpose.
		_ = cmd.Wait()
		_ = os.WriteFile(exitFile, []byte(cmd.ProcessState.String()), 0o644)
	}()
	rec := pidRecord{Pid: cmd.Process.Pid, Exe: bin, Start: procStart(cmd.Process.Pid)}
	data, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(c.pidDir(), name+".pid"), data, 0o644); err != nil {
		return 0, err
	}
	return rec.Pid, nil
}

// ExitStatus returns how the named daemon, started by this process, ended ("exit status
// 0", "signal: killed"), or "" while it runs or when another process started it.
func (c *Config) ExitStatus(name string) string {
	data, _ := os.ReadFile(filepath.Join(c.pidDir(), name+".exit"))
	return string(data)
}

// procStart returns the start time of pid in clock ticks since boot, or 0.
func procStart(pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after it follow the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(fields[19], 10, 64)
	return v
}

// alive reports whether rec still names the process it was written for.
func (rec pidRecord) alive() bool {
	if rec.Pid <= 1 {
		return false
	}
	st := procStart(rec.Pid)
	if st == 0 || (rec.Start != 0 && st != rec.Start) {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", rec.Pid))
	if err != nil {
		return false
	}
	return strings.TrimSuffix(exe, " (deleted)") == rec.Exe
}

func (c *Config) readPid(name string) (pidRecord, error) {
	var rec pidRecord
	data, err := os.ReadFile(filepath.Join(c.pidDir(), name+".pid"))
	if err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(data, &rec)
}

// Running reports whether the named daemon of the harness is alive.
func (c *Config) Running(name string) bool {
	rec, err := c.readPid(name)
	return err == nil && rec.alive()
}

// Pids returns the recorded pids of live harness daemons by name.
func (c *Config) Pids() map[string]int {
	out := map[string]int{}
	entries, _ := os.ReadDir(c.pidDir())
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok {
			continue
		}
		if rec, err := c.readPid(name); err == nil && rec.alive() {
			out[name] = rec.Pid
		}
	}
	return out
}

// stopDaemon sends SIGTERM to the named daemon, waits up to grace for it to exit, then
// SIGKILLs it. A missing pid file or a dead process is success.
func (c *Config) stopDaemon(ctx context.Context, name string, grace time.Duration) error {
	rec, err := c.readPid(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if rec.alive() {
		_ = syscall.Kill(rec.Pid, syscall.SIGTERM)
		if !waitFor(ctx, grace, func() bool { return !rec.alive() }) {
			c.Logf("%s (pid %d) did not stop within %s: killing it", name, rec.Pid, grace)
			_ = syscall.Kill(rec.Pid, syscall.SIGKILL)
			if !waitFor(ctx, 10*time.Second, func() bool { return !rec.alive() }) {
				return fmt.Errorf("%s (pid %d) survives SIGKILL", name, rec.Pid)
			}
		}
	}
	return os.Remove(filepath.Join(c.pidDir(), name+".pid"))
}

// stopAll stops every daemon with a pid file, in the reverse order of the given list first
// (names not listed go first).
func (c *Config) stopAll(ctx context.Context, order []string) error {
	entries, _ := os.ReadDir(c.pidDir())
	rank := map[string]int{}
	for i, n := range order {
		rank[n] = i + 1
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".pid"); ok {
			names = append(names, name)
		}
	}
	key := func(n string) int {
		if r, ok := rank[n]; ok {
			return r
		}
		return len(order) + 1
	}
	sort.SliceStable(names, func(i, j int) bool { return key(names[i]) > key(names[j]) })
	var errs []error
	for _, n := range names {
		if err := c.stopDaemon(ctx, n, 15*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitReady polls check until it returns nil, the process dies, or timeout passes; the error
// then carries the end of the process's log.
func (c *Config) waitReady(ctx context.Context, name string, timeout time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		if !c.Running(name) {
			return fmt.Errorf("%s exited: %v\n%s", name, last, c.logTail(name))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not ready after %s: %v\n%s", name, timeout, last, c.logTail(name))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Config) logTail(name string) string {
	data, _ := os.ReadFile(filepath.Join(c.LogDir(), name+".log"))
	return "---- end of " + name + ".log:\n" + tail(data, 3000)
}
