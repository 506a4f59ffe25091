package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// One agent per root dir: two would each take the other's pods for
// their own, mount and unmount the same volumes and remove each other's
// containers. The agent holds an flock(2) on rootLockName in its root dir
// for as long as it runs. The kernel lets go of an flock when its holder
// dies, however it dies, so a SIGKILLed agent leaves no stale lock, only
// the file, which the next agent takes over. An flock belongs to an open
// file description: a second open in the same process contends like
// another process, and a child does not inherit it (Go opens files
// close-on-exec).
//
// The kubelet's --lock-file is honoured as the kubelet does: the agent
// waits until it holds that lock, and with --exit-on-lock-contention it
// stops as soon as another process opens the file (the next agent, which
// then waits for the lock): a handover. The root dir is locked after the
// lock file, so a handover on one root dir works too.

// rootLockName is the lock file in the root dir; it holds the pid of the
// agent that holds the lock, for the message of the one refused.
const rootLockName = "nodeagent.lock"

// rootLockWait is how long a contended root dir is tried again before the
// agent refuses to start: an agent just killed (or handing over with
// --exit-on-lock-contention) lets go of it a moment after it stopped.
const rootLockWait = 2 * time.Second

// lockRetry is how often a contended lock is tried again.
const lockRetry = 100 * time.Millisecond

// errLocked: another open file description holds the lock.
var errLocked = errors.New("held by another process")

// agentLocks are the locks the agent holds while it runs.
type agentLocks struct {
	files []*os.File
	// unwatch stops the --exit-on-lock-contention watch.
	unwatch func()
}

// Close stops the watch and lets go of the locks.
func (l *agentLocks) Close() {
	if l.unwatch != nil {
		l.unwatch()
	}
	// The root dir's last: an agent waiting on the lock file for a
	// handover then finds the root dir free.
	for i := len(l.files) - 1; i >= 0; i-- {
		_ = l.files[i].Close()
	}
}

// takeLocks takes the --lock-file lock when one is given, waiting for it,
// then the root dir's, waiting only rootLockWait for that. With
// --exit-on-lock-contention the context returned ends when another
// process opens the lock file.
func takeLocks(ctx context.Context, cfg *agentConfig) (context.Context, *agentLocks, error) {
	logger := klog.FromContext(ctx)
	locks := &agentLocks{}
	rootLock := filepath.Join(cfg.rootDir, rootLockName)
	if cfg.lockFile != "" {
		logger.Info("Acquiring file lock", "path", cfg.lockFile)
		f, err := waitLock(ctx, cfg.lockFile)
		if err != nil {
			return nil, nil, fmt.Errorf("unable to acquire file lock on %q: %w", cfg.lockFile, err)
		}
		locks.files = append(locks.files, f)
		if cfg.exitOnLockContention {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			stop, err := watchLockContention(ctx, cfg.lockFile, cancel)
			if err != nil {
				cancel()
				locks.Close()
				return nil, nil, err
			}
			locks.unwatch = func() { stop(); cancel() }
		}
	}
	if err := os.MkdirAll(cfg.rootDir, 0o750); err != nil {
		locks.Close()
		return nil, nil, fmt.Errorf("create root dir: %w", err)
	}
	if sameFile(cfg.lockFile, rootLock) {
		// Held already, through the other name.
		if err := writePid(locks.files[0]); err != nil {
			logger.Info("Warning: writing the pid in the root dir's lock file failed", "path", rootLock, "err", err.Error())
		}
		return ctx, locks, nil
	}
	f, err := lockRootDir(ctx, cfg.rootDir, rootLockWait)
	if err != nil {
		locks.Close()
		return nil, nil, err
	}
	locks.files = append(locks.files, f)
	return ctx, locks, nil
}

// lockRootDir takes the root dir's lock, trying again for up to wait, and
// writes the agent's pid in the lock file. A root dir another agent holds
// is refused with its pid.
func lockRootDir(ctx context.Context, rootDir string, wait time.Duration) (*os.File, error) {
	path := filepath.Join(rootDir, rootLockName)
	deadline := time.Now().Add(wait)
	for {
		f, err := tryLock(path)
		if err == nil {
			if err := writePid(f); err != nil {
				// Only the message of an agent refused would lack it: a
				// full root dir filesystem does not keep the agent down.
				klog.FromContext(ctx).Info("Warning: writing the pid in the root dir's lock file failed", "path", path, "err", err.Error())
			}
			return f, nil
		}
		if !errors.Is(err, errLocked) {
			return nil, fmt.Errorf("lock root dir: %w", err)
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("root dir %s is in use by another nodeagent%s, which holds the lock %s: one agent may run per root dir",
				rootDir, holderPid(path), path)
		}
		if err := sleepCtx(ctx, lockRetry); err != nil {
			return nil, err
		}
	}
}

// waitLock takes the lock on path, waiting as long as it takes (as the
// kubelet's blocking flock does), or until ctx ends.
func waitLock(ctx context.Context, path string) (*os.File, error) {
	logged := false
	for {
		f, err := tryLock(path)
		if !errors.Is(err, errLocked) {
			return f, err
		}
		if !logged {
			klog.FromContext(ctx).Info("Waiting for the file lock another process holds", "path", path)
			logged = true
		}
		if err := sleepCtx(ctx, lockRetry); err != nil {
			return nil, err
		}
	}
}

// tryLock opens path, creating it, and takes an exclusive flock on it
// without waiting; errLocked when another open file holds it.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return f, nil
}

// writePid replaces what the lock file holds (a dead holder's pid) with
// this process's.
func writePid(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// holderPid names the pid written in the lock file at path, as " (pid N)",
// or nothing when it holds none yet.
func holderPid(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return ""
	}
	return fmt.Sprintf(" (pid %d)", pid)
}

// watchLockContention calls contended when another process opens the
// lock file at path or removes it, as the kubelet's
// --exit-on-lock-contention does. stop ends the watch.
func watchLockContention(ctx context.Context, path string, contended func()) (stop func(), err error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watch lock file %s: %w", path, err)
	}
	// Non-blocking, so that the runtime's poller serves reads and Close
	// ends one in flight.
	w := os.NewFile(uintptr(fd), "inotify")
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN|unix.IN_DELETE_SELF); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("watch lock file %s: %w", path, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		if _, err := w.Read(buf); err != nil {
			return // stopped
		}
		klog.FromContext(ctx).Info("Another process opened the lock file: stopping (--exit-on-lock-contention)", "path", path)
		contended()
	}()
	return func() { _ = w.Close(); <-done }, nil
}

// sameFile says whether two paths name one file; an empty path names none.
func sameFile(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return nil
}
