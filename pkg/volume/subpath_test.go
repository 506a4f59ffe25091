package volume

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
	mps, _ := kernelMounter{}.mountPoints("")
	if left := mountsUnder(mps, f.root); len(left) != 0 {
		t.Errorf("mounts left: %+v", left)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "host-secret")); err != nil || string(b) != "host" {
		t.Errorf("host file damaged: %q %v", b, err)
	}
}

// swapBeforeBind is the kernel mounter with one step added: just before a
// subPath bind, after PrepareSubPath has resolved and checked the path,
// it runs swap. That is the moment of CVE-2017-1002101: a check of the
// path followed by a mount of the path again mounts whatever the path
// names by then.
type swapBeforeBind struct {
	kernelMounter
	swap func(t *testing.T)
	t    *testing.T
	// swapped counts the swaps done, so a test knows the dangerous
	// interleaving happened.
	swapped int
}

func (m *swapBeforeBind) mount(source, target, fstype string, flags uintptr, data string) error {
	if strings.Contains(target, "/volume-subpaths/") && m.swap != nil {
		m.swap(m.t)
		m.swapped++
	}
	return m.kernelMounter.mount(source, target, fstype, flags, data)
}

// TestPrepareSubPathSymlinkRace makes the race happen by construction: the
// volume's directory d is exchanged (RENAME_EXCHANGE) with a symlink to the
// host after PrepareSubPath checked it and before it binds, or before it
// checks. Every bind that succeeds must show the volume's content, never
// the host's, and a link present at the check must be refused.
func TestPrepareSubPathSymlinkRace(t *testing.T) {
	f := newKernelFixture(t)
	ctx := context.Background()
	pod := basePod(withVolume("data", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}))
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	vol := mounts["data"].HostPath
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "host-marker"), nil, 0o600))
	must(os.WriteFile(filepath.Join(outside, "file"), []byte("host"), 0o600))
	// d and other are exchanged atomically, so d always exists: now the
	// volume's directory, now a link to the host.
	d, other := filepath.Join(vol, "d"), filepath.Join(vol, "other")
	must(os.Mkdir(d, 0o755))
	must(os.WriteFile(filepath.Join(d, "volume-marker"), nil, 0o644))
	must(os.WriteFile(filepath.Join(d, "file"), []byte("volume"), 0o644))
	must(os.Symlink(outside, other))
	exchange := func(t *testing.T) {
		t.Helper()
		if err := unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, other, unix.RENAME_EXCHANGE); err != nil {
			t.Fatalf("exchange: %v", err)
		}
	}
	dIsLink := func() bool {
		fi, err := os.Lstat(d)
		must(err)
		return fi.Mode()&os.ModeSymlink != 0
	}
	m := &swapBeforeBind{t: t}
	f.mgr = mustManagerWith(t, f, m)

	tests := []struct {
		name        string
		subPath     string
		linkAtCheck bool // d is the host link when PrepareSubPath starts
		swapAtBind  bool // d is exchanged between the check and the bind
		wantErr     string
		wantFile    string // the bound directory must show it
		wantData    string // the bound file's content
	}{
		{name: "directory swapped for a host link before the bind", subPath: "d", swapAtBind: true, wantFile: "volume-marker"},
		{name: "file's parent swapped for a host link before the bind", subPath: "d/file", swapAtBind: true, wantData: "volume"},
		{name: "host link in place at the check", subPath: "d", linkAtCheck: true, wantErr: "escapes the volume"},
		{name: "host link in place at the check, file below", subPath: "d/file", linkAtCheck: true, wantErr: "escapes the volume"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m.t = t
			if dIsLink() != tc.linkAtCheck {
				exchange(t)
			}
			m.swap, m.swapped = nil, 0
			if tc.swapAtBind {
				m.swap = func(t *testing.T) {
					exchange(t)
					if !dIsLink() {
						t.Fatal("d is not the host link at the bind")
					}
				}
			}
			target, err := f.mgr.PrepareSubPath(ctx, SubPathRequest{PodUID: pod.UID, Volume: "data", VolumePath: vol, Container: "c", MountIndex: i, SubPath: tc.subPath})
			if tc.swapAtBind && m.swapped != 1 {
				t.Fatalf("swapped %d times before the bind, want 1 (err %v)", m.swapped, err)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q (bound %s)", err, tc.wantErr, target)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantFile != "" {
				if _, err := os.Stat(filepath.Join(target, "host-marker")); err == nil {
					t.Fatalf("bind %s exposes the host directory", target)
				}
				if _, err := os.Stat(filepath.Join(target, tc.wantFile)); err != nil {
					t.Fatalf("bind %s does not show the volume's directory: %v", target, err)
				}
			}
			if tc.wantData != "" {
				if b, err := os.ReadFile(target); err != nil || string(b) != tc.wantData {
					t.Fatalf("bound file = %q %v, want %q", b, err, tc.wantData)
				}
			}
		})
	}
	must(f.mgr.UnmountPod(ctx, pod.UID))
	for name, want := range map[string]string{"host-marker": "", "file": "host"} {
		if b, err := os.ReadFile(filepath.Join(outside, name)); err != nil || string(b) != want {
			t.Errorf("host file %s damaged: %q %v", name, b, err)
		}
	}
}
