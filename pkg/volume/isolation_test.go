package volume

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A pod whose volume hangs must not hold up another pod.
func TestSlowPodDoesNotBlockOthers(t *testing.T) {
	f := newFixture(t)
	memory := v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}
	slow := basePod(withVolume("v", memory))
	fast := basePod(withVolume("v", memory))
	fast.UID = types.UID("uid-fast")
	f.mounter.blockOn = f.mgr.layout.Pod(slow.UID).VolumeDir(emptyDirPluginName, "v")
	f.mounter.release = make(chan struct{})
	f.mounter.entered = make(chan struct{}, 1)

	slowDone := make(chan error, 1)
	go func() {
		_, err := f.mgr.MountPod(context.Background(), slow)
		slowDone <- err
	}()
	<-f.mounter.entered // the slow pod now holds its own lock, in mount
	fastDone := make(chan error, 1)
	go func() {
		_, err := f.mgr.MountPod(context.Background(), fast)
		fastDone <- err
	}()
	select {
	case err := <-fastDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fast pod blocked behind slow pod")
	}
	close(f.mounter.release)
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
}

func TestFSGroupOnAPIData(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	f := newFixture(t, configMap("kube-root-ca.crt", map[string]string{"ca.crt": "PEM"}))
	pod := basePod(kubeAPIAccess, func(p *v1.Pod) {
		p.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr(int64(3000))}
	})
	mounts, err := f.mgr.MountPod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := mounts["kube-api-access-x7k2p"].HostPath
	for rel, want := range map[string]os.FileMode{"token": 0o640, "ca.crt": 0o644, "namespace": 0o644} {
		fi, err := os.Stat(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		gid, _ := fileGID(fi)
		if fi.Mode().Perm() != want || gid != 3000 {
			t.Errorf("%s: mode %v gid %d, want %v gid 3000", rel, fi.Mode().Perm(), gid, want)
		}
	}
}

func TestFSGroupNotReappliedEverySync(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	f := newFixture(t, configMap("kube-root-ca.crt", map[string]string{"ca.crt": "PEM"}))
	pod := basePod(kubeAPIAccess, withVolume("scratch", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}),
		func(p *v1.Pod) { p.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr(int64(3000))} })
	ctx := context.Background()
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(mounts["kube-api-access-x7k2p"].HostPath, "..data")
	before, _ := os.Readlink(data)
	// The pod makes a file of its own private.
	own := filepath.Join(mounts["scratch"].HostPath, "own")
	if err := os.WriteFile(own, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Readlink(data); after != before {
		t.Errorf("unchanged projected volume rewritten: %s -> %s", before, after)
	}
	if fi, _ := os.Stat(own); fi.Mode().Perm() != 0o600 {
		t.Errorf("pod's own file changed to %v on a later sync", fi.Mode().Perm())
	}
}
