package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMountInfo(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    mountPoint
		wantErr bool
	}{
		{name: "tmpfs with size",
			line: `36 35 0:44 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~secret/s rw,relatime shared:20 - tmpfs tmpfs rw,size=65536k`,
			want: mountPoint{path: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~secret/s", fstype: "tmpfs", source: "tmpfs", superOpts: "rw,size=65536k", shared: true}},
		{name: "no optional fields",
			line: `22 1 8:1 / / rw - ext4 /dev/sda1 rw,errors=remount-ro`,
			want: mountPoint{path: "/", fstype: "ext4", source: "/dev/sda1", superOpts: "rw,errors=remount-ro"}},
		{name: "escaped space in path",
			line: `40 35 0:50 / /mnt/with\040space rw - tmpfs tmpfs rw`,
			want: mountPoint{path: "/mnt/with space", fstype: "tmpfs", source: "tmpfs", superOpts: "rw"}},
		{name: "malformed", line: `garbage line`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMountInfo(strings.NewReader(tc.line+"\n"), "")
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parsed %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMountsUnder(t *testing.T) {
	mps := []mountPoint{{path: "/r/pods/a"}, {path: "/r/pods/a/v"}, {path: "/r/pods/ab"}, {path: "/r/pods/a/v"}, {path: "/other"}}
	got := fmt.Sprint(mountsUnder(mps, "/r/pods/a"))
	want := fmt.Sprint([]mountPoint{{path: "/r/pods/a/v"}, {path: "/r/pods/a/v"}, {path: "/r/pods/a"}})
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestKernelMountedAt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var m kernelMounter
	if fstype, mounted, err := m.mountedAt(dir); err != nil || mounted {
		t.Fatalf("a plain directory: %q mounted=%v err=%v", fstype, mounted, err)
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (CI runs as root)")
	}
	if err := m.mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer m.unmount(dir)
	if fstype, mounted, err := m.mountedAt(dir); err != nil || !mounted || fstype != "tmpfs" {
		t.Fatalf("a tmpfs: %q mounted=%v err=%v", fstype, mounted, err)
	}
	if err := ensureTmpfs(m, dir, nil, 0); err != nil {
		t.Fatalf("ensureTmpfs on the tmpfs already there: %v", err)
	}
	if mps, _ := m.mountPoints(""); len(mountsUnder(mps, dir)) != 1 {
		t.Fatalf("ensureTmpfs mounted again: %v", mountsUnder(mps, dir))
	}
}

func TestParseMountInfoKeepsWhatIsUnder(t *testing.T) {
	in := "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" +
		"30 22 0:40 / /r/pods/a rw - tmpfs tmpfs rw\n" +
		"31 30 0:41 / /r/pods/a/v\\040x rw shared:3 - tmpfs tmpfs rw\n" +
		"32 22 0:42 / /r/pods/ab rw - tmpfs tmpfs rw\n" +
		"33 22 0:43 / /r/pods\\040a/v rw - tmpfs tmpfs rw\n" +
		"34 30 0:44 / /r/pods/a/w rw - tmpfs tmpfs rw\n"
	for _, tc := range []struct {
		under string
		want  []string
	}{
		{"", []string{"/", "/r/pods/a", "/r/pods/a/v x", "/r/pods/ab", "/r/pods a/v", "/r/pods/a/w"}},
		{"/r/pods/a", []string{"/r/pods/a", "/r/pods/a/v x", "/r/pods/a/w"}},
		{"/r/pods/a/v x", []string{"/r/pods/a/v x"}},
		{"/r/pods a", []string{"/r/pods a/v"}},
		{"/r/pods/b", nil},
	} {
		mps, err := parseMountInfo(strings.NewReader(in), tc.under)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, mp := range mps {
			got = append(got, mp.path)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("under %q: %q, want %q", tc.under, got, tc.want)
		}
	}
	if mps, err := parseMountInfo(strings.NewReader("garbage line\n"), "/r"); err == nil {
		t.Errorf("a malformed line under a filter parsed as %+v", mps)
	}
}

// BenchmarkParseMountInfoUnder reads a node's table of 100 pods (four
// mounts each) for one pod's volume, as each teardown does.
func BenchmarkParseMountInfoUnder(b *testing.B) {
	var sb strings.Builder
	for i := range 100 {
		fmt.Fprintf(&sb, "%d 29 0:%d / /run/containerd/io.containerd.runtime.v2.task/k8s.io/%064d/rootfs rw,relatime - overlay overlay rw,lowerdir=/var/lib/containerd/snapshots/1/fs,upperdir=/var/lib/containerd/snapshots/%d/fs,workdir=/var/lib/containerd/snapshots/%d/work\n", 100+4*i, 50+i, i, i, i)
		fmt.Fprintf(&sb, "%d 29 0:%d / /run/containerd/io.containerd.grpc.v1.cri/sandboxes/%064d/shm rw,nosuid,nodev,noexec,relatime shared:%d - tmpfs shm rw,size=65536k\n", 101+4*i, 200+i, i, 300+i)
		fmt.Fprintf(&sb, "%d 29 0:%d / /var/lib/nodeagent/pods/0000-%04d/volumes/kubernetes.io~projected/kube-api-access-x rw,relatime shared:%d - tmpfs tmpfs rw,size=4096k\n", 102+4*i, 400+i, i, 500+i)
		fmt.Fprintf(&sb, "%d 29 0:%d / /run/netns/cni-%d rw shared:%d - nsfs nsfs rw\n", 103+4*i, 600+i, i, 700+i)
	}
	table := sb.String()
	dir := "/var/lib/nodeagent/pods/0000-0042/volumes/kubernetes.io~projected/kube-api-access-x"
	b.ReportAllocs()
	for b.Loop() {
		mps, err := parseMountInfo(strings.NewReader(table), dir)
		if err != nil || len(mps) != 1 {
			b.Fatal(len(mps), err)
		}
	}
}
