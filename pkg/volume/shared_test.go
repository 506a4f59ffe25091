package volume

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nodeagent/nodeagent/pkg/poddir"
)

func TestMakeRootShared(t *testing.T) {
	const root = "/var/lib/kubelet"
	tests := []struct {
		name  string
		table []mountPoint
		want  []string // mount calls: "fstype target data"
	}{
		{name: "private root filesystem: bind onto itself, then share",
			table: []mountPoint{{path: "/", fstype: "ext4"}},
			want:  []string{" /var/lib/kubelet ", " /var/lib/kubelet "}},
		{name: "already a shared mount of its own: nothing",
			table: []mountPoint{{path: "/", fstype: "ext4"}, {path: root, shared: true}},
			want:  nil},
		{name: "on a shared parent: nothing",
			table: []mountPoint{{path: "/", fstype: "ext4", shared: true}},
			want:  nil},
		{name: "a private mount of its own: share it only",
			table: []mountPoint{{path: "/", shared: true}, {path: root}},
			want:  []string{" /var/lib/kubelet "}},
		{name: "a shared mount of its own hidden by a later mount over a parent: bind and share",
			table: []mountPoint{{path: "/"}, {path: root, shared: true}, {path: "/var/lib"}},
			want:  []string{" /var/lib/kubelet ", " /var/lib/kubelet "}},
		{name: "a sibling with a common prefix does not count",
			table: []mountPoint{{path: "/"}, {path: "/var/lib/kube", shared: true}},
			want:  []string{" /var/lib/kubelet ", " /var/lib/kubelet "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fm := &fakeMounter{table: tt.table}
			m := &Manager{layout: poddir.New(root), mounter: fm}
			if err := m.MakeRootShared(); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fm.mounts, tt.want) {
				t.Errorf("mount calls %q, want %q", fm.mounts, tt.want)
			}
		})
	}
}

func TestParseMountInfoShared(t *testing.T) {
	in := "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n" +
		"28 27 0:25 / /private rw,relatime - tmpfs tmpfs rw\n" +
		"29 27 0:26 / /slave rw master:1 - tmpfs tmpfs rw\n"
	mps, err := parseMountInfo(strings.NewReader(in), "")
	if err != nil {
		t.Fatal(err)
	}
	got := []bool{mps[0].shared, mps[1].shared, mps[2].shared}
	if !reflect.DeepEqual(got, []bool{true, false, false}) {
		t.Errorf("shared = %v, want [true false false]", got)
	}
}
