package volume

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

func TestPrepareSubPath(t *testing.T) {
	f := newKernelFixture(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "host-secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pod := basePod(withVolume("data", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}))
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	vol := mounts["data"].HostPath
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(vol, "real/dir"), 0o755))
	must(os.WriteFile(filepath.Join(vol, "real/dir/file"), []byte("inside"), 0o644))
	must(os.Symlink("/", filepath.Join(vol, "escape")))
	must(os.Symlink("../../..", filepath.Join(vol, "real/up")))
	must(os.Symlink(outside, filepath.Join(vol, "abs")))
	must(os.Symlink("real/dir", filepath.Join(vol, "inner")))

	tests := []struct {
		name     string
		subPath  string
		wantErr  string
		wantFile string // a file the bound directory must show
		wantData string // content when the subPath is a file
	}{
		{name: "directory", subPath: "real/dir", wantFile: "file"},
		{name: "file", subPath: "real/dir/file", wantData: "inside"},
		{name: "symlink staying inside", subPath: "inner", wantFile: "file"},
		{name: "missing directories created", subPath: "new/a/b"},
		{name: "absolute symlink to /", subPath: "escape", wantErr: "escapes the volume"},
		{name: "symlink out through dot-dot", subPath: "real/up", wantErr: "escapes the volume"},
		{name: "symlink to a host directory", subPath: "abs/host-secret", wantErr: "escapes the volume"},
		{name: "missing below a planted link", subPath: "escape/new", wantErr: "escapes the volume"},
		{name: "dot-dot", subPath: "../x", wantErr: "must not contain '..'"},
		{name: "absolute", subPath: "/etc", wantErr: "relative path"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := SubPathRequest{PodUID: pod.UID, Volume: "data", VolumePath: vol, Container: "c", MountIndex: i, SubPath: tc.subPath}
			target, err := f.mgr.PrepareSubPath(ctx, req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if again, err := f.mgr.PrepareSubPath(ctx, req); err != nil || again != target {
				t.Fatalf("second call: %s %v", again, err)
			}
			if tc.wantFile != "" {
				if _, err := os.Stat(filepath.Join(target, tc.wantFile)); err != nil {
					t.Errorf("bound dir lacks %s: %v", tc.wantFile, err)
				}
			}
			if tc.wantData != "" {
				if b, err := os.ReadFile(target); err != nil || string(b) != tc.wantData {
					t.Errorf("bound file = %q %v", b, err)
				}
			}
		})
	}
	t.Run("created directory is inside the volume", func(t *testing.T) {
		if fi, err := os.Lstat(filepath.Join(vol, "new/a/b")); err != nil || !fi.IsDir() {
			t.Fatalf("new/a/b: %v", err)
		}
	})
	must(f.mgr.UnmountPod(ctx, pod.UID))
	mps, _ := kernelMounter{}.mountPoints()
	if left := mountsUnder(mps, f.root); len(left) != 0 {
		t.Errorf("mounts left: %+v", left)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "host-secret")); err != nil || string(b) != "host" {
		t.Errorf("host file damaged: %q %v", b, err)
	}
}

// TestPrepareSubPathSymlinkRace swaps a directory and a symlink to the
// host while subPaths are prepared: every bind that succeeds must show the
// volume's directory, never the host's.
func TestPrepareSubPathSymlinkRace(t *testing.T) {
	f := newKernelFixture(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "host-marker"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pod := basePod(withVolume("data", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}))
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	vol := mounts["data"].HostPath
	// d and other are exchanged atomically (RENAME_EXCHANGE), so d always
	// exists: now the volume's directory, now a link to the host.
	target := filepath.Join(vol, "d")
	other := filepath.Join(vol, "other")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "volume-marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, other); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = unix.Renameat2(unix.AT_FDCWD, target, unix.AT_FDCWD, other, unix.RENAME_EXCHANGE)
		}
	}()
	var bound, refused int
	for i := range 200 {
		p, err := f.mgr.PrepareSubPath(ctx, SubPathRequest{PodUID: pod.UID, Volume: "data", VolumePath: vol, Container: "c", MountIndex: i, SubPath: "d"})
		if err != nil {
			refused++
			continue
		}
		bound++
		if _, err := os.Stat(filepath.Join(p, "volume-marker")); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("bind %d does not show the volume's directory: %v", i, err)
		}
		if _, err := os.Stat(filepath.Join(p, "host-marker")); err == nil {
			close(stop)
			wg.Wait()
			t.Fatalf("bind %d exposes the host directory", i)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d bound, %d refused", bound, refused)
	if bound == 0 || refused == 0 {
		t.Logf("the race did not hit both cases this run")
	}
	if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "host-marker")); err != nil {
		t.Errorf("host directory damaged: %v", err)
	}
}
