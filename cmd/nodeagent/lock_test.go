package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An flock belongs to an open file description, so a second lock taken in
// this process through another open contends as a second agent would.
func TestRootDirLockRefusesASecondAgent(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	first, err := lockRootDir(ctx, root, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockRootDir(ctx, root, 3*lockRetry)
	if err == nil {
		t.Fatal("a second lock on the same root dir was granted")
	}
	for _, want := range []string{root, fmt.Sprintf("pid %d", os.Getpid()), filepath.Join(root, rootLockName)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := lockRootDir(ctx, root, 0)
	if err != nil {
		t.Fatalf("after the first let go: %v", err)
	}
	_ = second.Close()
}

// A killed agent leaves its lock file with its pid but no lock: the next
// agent takes it over and writes its own pid.
func TestRootDirLockTakesOverAStaleLockFile(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, rootLockName)
	if err := os.WriteFile(path, []byte("4194303\nleftover\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := lockRootDir(context.Background(), root, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), fmt.Sprintf("%d\n", os.Getpid()); got != want {
		t.Errorf("lock file holds %q, want %q", got, want)
	}
}

func TestRootDirLockWaitsForAHolderLettingGo(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	first, err := lockRootDir(ctx, root, 0)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(2*lockRetry, func() { _ = first.Close() })
	second, err := lockRootDir(ctx, root, 10*time.Second)
	if err != nil {
		t.Fatalf("the lock was not taken once its holder let go: %v", err)
	}
	_ = second.Close()
}

func TestTakeLocks(t *testing.T) {
	ctx := context.Background()
	t.Run("root dir only, created", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "root")
		_, locks, err := takeLocks(ctx, &agentConfig{rootDir: root})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := takeLocks(ctx, &agentConfig{rootDir: root}); err == nil {
			t.Error("a second agent took the root dir")
		}
		locks.Close()
		_, again, err := takeLocks(ctx, &agentConfig{rootDir: root})
		if err != nil {
			t.Fatalf("after Close: %v", err)
		}
		again.Close()
	})
	t.Run("--lock-file is the root dir's lock", func(t *testing.T) {
		root := t.TempDir()
		_, locks, err := takeLocks(ctx, &agentConfig{rootDir: root, lockFile: filepath.Join(root, rootLockName)})
		if err != nil {
			t.Fatal(err)
		}
		defer locks.Close()
		if len(locks.files) != 1 {
			t.Errorf("%d locks held, want one", len(locks.files))
		}
		if got := holderPid(filepath.Join(root, rootLockName)); got != fmt.Sprintf(" (pid %d)", os.Getpid()) {
			t.Errorf("holder = %q, want this process", got)
		}
	})
	t.Run("--lock-file is waited for", func(t *testing.T) {
		dir := t.TempDir()
		lockFile := filepath.Join(dir, "kubelet.lock")
		other, err := tryLock(lockFile)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(2*lockRetry, func() { _ = other.Close() })
		_, locks, err := takeLocks(ctx, &agentConfig{rootDir: filepath.Join(dir, "root"), lockFile: lockFile})
		if err != nil {
			t.Fatal(err)
		}
		locks.Close()
	})
	t.Run("--exit-on-lock-contention ends the run when another opens the lock file", func(t *testing.T) {
		dir := t.TempDir()
		lockFile := filepath.Join(dir, "kubelet.lock")
		runCtx, locks, err := takeLocks(ctx, &agentConfig{rootDir: filepath.Join(dir, "root"), lockFile: lockFile, exitOnLockContention: true})
		if err != nil {
			t.Fatal(err)
		}
		defer locks.Close()
		select {
		case <-runCtx.Done():
			t.Fatal("ended before any contention")
		case <-time.After(3 * lockRetry):
		}
		next, err := os.Open(lockFile)
		if err != nil {
			t.Fatal(err)
		}
		defer next.Close()
		select {
		case <-runCtx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the run went on after another process opened the lock file")
		}
	})
}
