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
			got, err := parseMountInfo(strings.NewReader(tc.line + "\n"))
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
	if mps, _ := m.mountPoints(); len(mountsUnder(mps, dir)) != 1 {
		t.Fatalf("ensureTmpfs mounted again: %v", mountsUnder(mps, dir))
	}
}
