package volume

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// newKernelFixture is a fixture whose mounts are real: tmpfs under the
// test's temp dir, unmounted again in Cleanup whatever the test did.
func newKernelFixture(t *testing.T) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount tmpfs")
	}
	f := newFixture(t, configMap("kube-root-ca.crt", map[string]string{"ca.crt": "PEM"}),
		secret("creds", map[string]string{"pass": "p"}))
	f.mgr = mustManagerWith(t, f, kernelMounter{})
	t.Cleanup(func() {
		mps, err := kernelMounter{}.mountPoints("")
		if err != nil {
			t.Error(err)
			return
		}
		for _, mp := range mountsUnder(mps, f.root) {
			_ = kernelMounter{}.unmount(mp.path)
		}
	})
	return f
}

func mustManagerWith(t *testing.T, f *fixture, m mounter) *Manager {
	t.Helper()
	mgr, err := NewManager(Config{RootDir: f.root, Client: kubetest.Wrap(f.client), Clock: f.clock, HugePagesDir: t.TempDir(), mounter: m})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

func allKinds(hostDir string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		kubeAPIAccess(p)
		withVolume("scratch", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}})(p)
		withVolume("cache", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: ptr(mustQ("16Mi"))}})(p)
		withVolume("creds", v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}})(p)
		withVolume("host", v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir}})(p)
	}
}

func TestKernelMountUnmountLeavesNothing(t *testing.T) {
	f := newKernelFixture(t)
	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "keep"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 20 {
		pod := basePod(allKinds(hostDir))
		pod.UID = types.UID("uid-" + string(rune('a'+i)))
		mounts, err := f.mgr.MountPod(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		mps, _ := kernelMounter{}.mountPoints("")
		cache, ok := findMount(mps, mounts["cache"].HostPath)
		if !ok || cache.fstype != "tmpfs" || !strings.Contains(cache.superOpts, "size=16384k") {
			t.Fatalf("memory emptyDir mount = %+v, %v", cache, ok)
		}
		// A container writes into its emptyDirs, and plants links out.
		for _, v := range []string{"scratch", "cache"} {
			if err := os.WriteFile(filepath.Join(mounts[v].HostPath, "data"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(hostDir, filepath.Join(mounts[v].HostPath, "escape")); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
			t.Fatal(err)
		}
		if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
			t.Fatalf("second unmount: %v", err)
		}
	}
	mps, _ := kernelMounter{}.mountPoints("")
	if left := mountsUnder(mps, f.root); len(left) != 0 {
		t.Errorf("mounts left: %+v", left)
	}
	entries, _ := os.ReadDir(filepath.Join(f.root, "pods"))
	if len(entries) != 0 {
		t.Errorf("pod directories left: %d", len(entries))
	}
	if b, err := os.ReadFile(filepath.Join(hostDir, "keep")); err != nil || string(b) != "host" {
		t.Errorf("host directory damaged: %q %v", b, err)
	}
	if len(f.mgr.pods) != 0 || len(f.mgr.tokens.cache) != 0 {
		t.Errorf("state left: %d pod locks, %d tokens", len(f.mgr.pods), len(f.mgr.tokens.cache))
	}
}

func TestKernelReconstructAfterRestart(t *testing.T) {
	f := newKernelFixture(t)
	hostDir := t.TempDir()
	ctx := context.Background()
	pod := basePod(allKinds(hostDir))
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mounts["cache"].HostPath, "work"), []byte("w"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := kernelMounter{}.mountPoints("")

	// The agent restarts: a new Manager over the same root.
	restarted := mustManagerWith(t, f, kernelMounter{})
	pods, err := restarted.Reconstruct(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].UID != pod.UID {
		t.Fatalf("reconstructed %+v", pods)
	}
	if uids, err := restarted.PodUIDs(); err != nil || len(uids) != 1 || uids[0] != pod.UID {
		t.Fatalf("PodUIDs = %v, %v; want [%s]", uids, err, pod.UID)
	}
	if !restarted.HasPod(pod.UID) || restarted.HasPod("../"+pod.UID) || restarted.HasPod("other") {
		t.Error("HasPod: the pod's directory, a hostile UID, a pod without one")
	}
	rp := pods[0]
	wantVols := map[string]string{
		"kube-api-access-x7k2p": projectedPluginName, "scratch": emptyDirPluginName,
		"cache": emptyDirPluginName, "creds": secretPluginName,
	}
	for name, plugin := range wantVols {
		if rp.Volumes[name] != plugin {
			t.Errorf("volume %s = %q, want %q", name, rp.Volumes[name], plugin)
		}
	}
	if len(rp.MountPoints) != 3 {
		t.Errorf("mount points = %v, want the three tmpfs", rp.MountPoints)
	}
	// The pod's next sync remounts nothing and loses nothing.
	if _, err := restarted.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	after, _ := kernelMounter{}.mountPoints("")
	if len(mountsUnder(after, f.root)) != len(mountsUnder(before, f.root)) {
		t.Errorf("mounts changed across restart: %d -> %d", len(mountsUnder(before, f.root)), len(mountsUnder(after, f.root)))
	}
	if b, err := os.ReadFile(filepath.Join(mounts["cache"].HostPath, "work")); err != nil || string(b) != "w" {
		t.Errorf("file written before restart: %q %v", b, err)
	}
	if err := restarted.UnmountPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
}

func TestUnmountPodDoesNotFollowSymlinks(t *testing.T) {
	f := newFixture(t)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	uid := types.UID("uid-links")
	vols := f.mgr.layout.Pod(uid).VolumesDir()
	if err := os.MkdirAll(filepath.Join(vols, "kubernetes.io~empty-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A plugin directory and a volume directory replaced by links out.
	if err := os.Symlink(outside, filepath.Join(vols, "kubernetes.io~configmap")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(vols, "kubernetes.io~empty-dir", "v")); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.UnmountPod(context.Background(), uid); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "host" {
		t.Fatalf("outside file damaged: %q %v", b, err)
	}
	if _, err := os.Lstat(f.mgr.layout.Pod(uid).Dir()); !os.IsNotExist(err) {
		t.Errorf("pod dir left: %v", err)
	}
}

func TestUnmountPodRefusesWhileMounted(t *testing.T) {
	f := newFixture(t)
	pod := basePod(withVolume("cache", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}))
	mounts, err := f.mgr.MountPod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	// An unmount that silently does nothing (EBUSY and friends).
	f.mgr.mounter = stuckMounter{f.mounter}
	f.mgr.plugins[0].(*emptyDirPlugin).mounter = stuckMounter{f.mounter}
	if err := os.WriteFile(filepath.Join(mounts["cache"].HostPath, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = f.mgr.UnmountPod(context.Background(), pod.UID)
	if err == nil || !strings.Contains(err.Error(), "still mounted") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(mounts["cache"].HostPath, "data")); err != nil {
		t.Errorf("files below a mount removed: %v", err)
	}
}

type stuckMounter struct{ *fakeMounter }

func (stuckMounter) unmount(string) error { return nil }

func TestUnmountUnknownPodIsSuccess(t *testing.T) {
	f := newFixture(t)
	if err := f.mgr.UnmountPod(context.Background(), "never-seen"); err != nil {
		t.Fatal(err)
	}
	pods, err := f.mgr.Reconstruct(context.Background())
	if err != nil || len(pods) != 0 {
		t.Fatalf("reconstruct on empty root: %v %v", pods, err)
	}
	if uids, err := f.mgr.PodUIDs(); err != nil || len(uids) != 0 {
		t.Fatalf("PodUIDs on empty root: %v %v", uids, err)
	}
}
