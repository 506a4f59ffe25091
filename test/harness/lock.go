package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// The machine has room for one harness cluster: its ports, interfaces and cgroup root are
// fixed. A process that brings one up or down holds an exclusive lock beside the run dir
// until it exits, so that a second run (another test binary, make up, make bench) waits
// instead of tearing the first one down under its feet.
var runLock struct {
	sync.Mutex
	held map[string]*os.File // lock path → its open file, for the life of the process
}

// lockRunDir takes the run dir's lock for this process, waiting while another process
// holds it. Taking it again in the same process is a no-op.
func (c *Config) lockRunDir() error {
	path := c.RunDir + ".lock"
	runLock.Lock()
	defer runLock.Unlock()
	if runLock.held[path] != nil {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("harness lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		c.Logf("another harness run holds %s; waiting for it to end", path)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return fmt.Errorf("harness lock: %w", err)
		}
	}
	if runLock.held == nil {
		runLock.held = map[string]*os.File{}
	}
	runLock.held[path] = f
	return nil
}

// Lock takes the run dir's lock for this process now (Up and Down take it anyway): for a
// test that must read the machine's state while no other harness run changes it.
func (c *Config) Lock() error { return c.lockRunDir() }

// lockBuild takes an exclusive lock on the cache entry name (<cache>/<name>.lock) for a
// build into it, waiting while another process builds it (make test builds the
// conformance suite in the background while other suites run); the caller looks again
// whether the entry is complete once it holds the lock. unlock releases it.
func (c *Config) lockBuild(name string) (unlock func(), err error) {
	if err := os.MkdirAll(c.CacheDir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(c.CacheDir, name+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		c.Logf("%s: another process is building it; waiting for it to end", name)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("build lock: %w", err)
		}
	}
	return func() { f.Close() }, nil
}
