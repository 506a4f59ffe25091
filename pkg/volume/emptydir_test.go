package volume

import (
	"context"
	"golang.org/x/sys/unix"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestEmptyDirMemorySize(t *testing.T) {
	alloc := mustQ("8Gi")
	noLimit := func(p *v1.Pod) { p.Spec.Containers[0].Resources.Limits = nil }
	tests := []struct {
		name      string
		pod       *v1.Pod
		sizeLimit *resource.Quantity
		alloc     *resource.Quantity
		want      string
	}{
		{name: "pod limit under allocatable", pod: basePod(), alloc: &alloc, want: "128Mi"},
		{name: "sizeLimit smaller than pod limit", pod: basePod(), sizeLimit: ptr(mustQ("10Mi")), alloc: &alloc, want: "10Mi"},
		{name: "sizeLimit larger than pod limit is capped", pod: basePod(), sizeLimit: ptr(mustQ("1Gi")), alloc: &alloc, want: "128Mi"},
		{name: "no pod limit: allocatable", pod: basePod(noLimit), alloc: &alloc, want: "8Gi"},
		{name: "no pod limit, sizeLimit", pod: basePod(noLimit), sizeLimit: ptr(mustQ("1Gi")), alloc: &alloc, want: "1Gi"},
		{name: "nothing known: kernel default", pod: basePod(noLimit), want: ""},
		{name: "zero sizeLimit ignored", pod: basePod(), sizeLimit: ptr(mustQ("0")), alloc: &alloc, want: "128Mi"},
		{name: "init container larger than the sum", pod: basePod(func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: mustQ("512Mi")}}}}
		}), alloc: &alloc, want: "512Mi"},
		{name: "init container without limit: no pod limit", pod: basePod(func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i"}}
		}), alloc: &alloc, want: "8Gi"},
		{name: "pod-level limit wins", pod: basePod(func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: mustQ("256Mi")}}
		}), alloc: &alloc, want: "256Mi"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := emptyDirMemorySize(tc.alloc, tc.pod, tc.sizeLimit)
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("size = %v, want none", got)
			case tc.want != "" && (got == nil || got.Cmp(mustQ(tc.want)) != 0):
				t.Errorf("size = %v, want %s", got, tc.want)
			}
		})
	}
}

func TestEmptyDirSetUp(t *testing.T) {
	tests := []struct {
		name       string
		medium     v1.StorageMedium
		hugePages  bool
		pod        *v1.Pod
		wantMounts []string
		wantErr    string
	}{
		{name: "disk", medium: v1.StorageMediumDefault},
		{name: "memory", medium: v1.StorageMediumMemory, wantMounts: []string{"tmpfs DIR size=134217728"}},
		{name: "hugepages without host support", medium: v1.StorageMediumHugePages, wantErr: "the node has no huge pages"},
		{name: "hugepages without request", medium: v1.StorageMediumHugePages, hugePages: true,
			wantErr: "no resource request for huge pages"},
		{name: "hugepages", medium: v1.StorageMediumHugePages, hugePages: true, pod: basePod(func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests["hugepages-2Mi"] = mustQ("4Mi")
		}), wantMounts: []string{"hugetlbfs DIR pagesize=2Mi"}},
		{name: "hugepages of a size not requested", medium: "HugePages-1Gi", hugePages: true, pod: basePod(func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests["hugepages-2Mi"] = mustQ("4Mi")
		}), wantErr: "no resource request for huge pages"},
		{name: "unknown medium", medium: "Tape", wantErr: `medium "Tape" is not supported`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fm := &fakeMounter{}
			hp := t.TempDir()
			if tc.hugePages {
				if err := os.Mkdir(filepath.Join(hp, "hugepages-2048kB"), 0o755); err != nil {
					t.Fatal(err)
				}
			} else {
				hp = filepath.Join(hp, "absent")
			}
			p := &emptyDirPlugin{mounter: fm, hugePagesDir: hp,
				allocatableMemory: func() *resource.Quantity { q := mustQ("8Gi"); return &q }}
			pod := tc.pod
			if pod == nil {
				pod = basePod()
			}
			dir := filepath.Join(t.TempDir(), "vol")
			req := &setUpRequest{pod: pod, dir: dir, vol: &v1.Volume{Name: "e",
				VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: tc.medium}}}}
			// Twice: the second call must not mount again.
			for range 2 {
				mnt, err := p.setUp(context.Background(), req)
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("err = %v, want %q", err, tc.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if mnt.HostPath != dir || mnt.ReadOnly || !mnt.Managed {
					t.Errorf("mount = %+v", mnt)
				}
			}
			var want []string
			for _, m := range tc.wantMounts {
				want = append(want, strings.Replace(m, "DIR", dir, 1))
			}
			if strings.Join(fm.mounts, "|") != strings.Join(want, "|") {
				t.Errorf("mounts = %q, want %q", fm.mounts, want)
			}
			fi, err := os.Stat(dir)
			if err != nil || fi.Mode().Perm() != 0o777 {
				t.Errorf("dir mode: %v %v", fi, err)
			}
		})
	}
}

func TestEmptyDirFSGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	dir := filepath.Join(t.TempDir(), "vol")
	p := &emptyDirPlugin{mounter: &fakeMounter{}, allocatableMemory: func() *resource.Quantity { return nil }}
	req := &setUpRequest{pod: basePod(), dir: dir, fsGroup: ptr(int64(2000)),
		vol: &v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	if _, err := p.setUp(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(dir)
	if gid, _ := fileGID(fi); gid != 2000 || fi.Mode()&os.ModeSetgid == 0 {
		t.Errorf("gid=%d mode=%v, want 2000 with setgid", gid, fi.Mode())
	}
}

// TestEmptyDirMemoryKeepsSticky: a memory-backed emptyDir on a real tmpfs keeps the tmpfs
// root's sticky bit (1777), and with an fsGroup gains setgid beside it, as on a kubelet
// node (the upstream "EmptyDir volumes when FSGroup is specified" specs read "dgtrwxrwxrwx").
func TestEmptyDirMemoryKeepsSticky(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	for _, fsGroup := range []*int64{nil, ptr(int64(123))} {
		dir := filepath.Join(t.TempDir(), "vol")
		p := &emptyDirPlugin{mounter: kernelMounter{}, allocatableMemory: func() *resource.Quantity { q := mustQ("1Gi"); return &q }}
		req := &setUpRequest{pod: basePod(), dir: dir, fsGroup: fsGroup,
			vol: &v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
		if _, err := p.setUp(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		want := os.ModeDir | os.ModeSticky | 0o777
		if fsGroup != nil {
			want |= os.ModeSetgid
		}
		if fi.Mode() != want {
			t.Errorf("fsGroup %v: mode %v, want %v", fsGroup, fi.Mode(), want)
		}
	}
}
