package volume

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// The directories a subPath makes take the mode of the volume's root,
// setgid included, whatever the umask: the kubelet's SafeMakeDir with the
// volume's mode.
func TestSubPathDirsTakeTheVolumesMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		root os.FileMode
	}{
		{name: "emptyDir", root: 0o777},
		{name: "emptyDir with an fsGroup", root: 0o777 | os.ModeSetgid},
		{name: "host directory", root: 0o750},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := unix.Umask(0o022)
			defer unix.Umask(old)
			root := filepath.Join(t.TempDir(), "vol")
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(root, tc.root); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(root, "there"), 0o700); err != nil {
				t.Fatal(err)
			}
			fd, err := openBeneath(root, "there/new/deeper")
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
			for _, dir := range []string{"there/new", "there/new/deeper"} {
				fi, err := os.Stat(filepath.Join(root, dir))
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Mode() &^ os.ModeDir; got != tc.root {
					t.Errorf("%s: mode %v, want the volume's %v", dir, got, tc.root)
				}
			}
			// What existed keeps its mode.
			if fi, err := os.Stat(filepath.Join(root, "there")); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("existing directory: %v %v, want it untouched (0700)", fi, err)
			}
		})
	}
}

// An emptyDir of a pod with an fsGroup: a subPath that does not exist yet
// is made group-owned and writable by every user of the pod, 2777.
func TestPrepareSubPathEmptyDirFSGroup(t *testing.T) {
	f := newKernelFixture(t)
	ctx := context.Background()
	pod := basePod(withVolume("data", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}), func(p *v1.Pod) {
		p.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr(int64(2000))}
	})
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	vol := mounts["data"].HostPath
	if _, err := f.mgr.PrepareSubPath(ctx, SubPathRequest{PodUID: pod.UID, Volume: "data", VolumePath: vol,
		Container: "c", SubPath: "logs/app"}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"logs", "logs/app"} {
		fi, err := os.Stat(filepath.Join(vol, dir))
		if err != nil {
			t.Fatal(err)
		}
		gid, _ := fileGID(fi)
		if want := 0o777 | os.ModeSetgid; fi.Mode()&^os.ModeDir != want || gid != 2000 {
			t.Errorf("%s: mode %v group %d, want %v and the fsGroup 2000", dir, fi.Mode(), gid, want)
		}
	}
	if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
}
