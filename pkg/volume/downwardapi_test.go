package volume

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestDownwardAPIPayload covers what the volume adds to pkg/downward,
// whose table holds the values themselves: the volume's use of it (no
// env-only fields, the node's allocatable for unset limits), the file
// paths and modes, and errors that name the item.
func TestDownwardAPIPayload(t *testing.T) {
	alloc := v1.ResourceList{v1.ResourceCPU: mustQ("4"), v1.ResourceMemory: mustQ("8Gi")}
	field := func(path string) v1.DownwardAPIVolumeFile {
		return v1.DownwardAPIVolumeFile{Path: "f", FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}
	}
	res := func(container, r, divisor string) v1.DownwardAPIVolumeFile {
		f := v1.DownwardAPIVolumeFile{Path: "f", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: container, Resource: r}}
		if divisor != "" {
			f.ResourceFieldRef.Divisor = mustQ(divisor)
		}
		return f
	}
	tests := []struct {
		name    string
		item    v1.DownwardAPIVolumeFile
		want    string
		wantErr string
	}{
		{name: "labels", item: field("metadata.labels"), want: "app=\"web\"\ntier=\"front\""},
		{name: "annotations quoted", item: field("metadata.annotations"), want: `note="a \"quoted\" value"`},
		{name: "env-only field refused", item: field("status.podIP"), wantErr: "downwardAPI f: unsupported fieldPath: status.podIP"},
		{name: "memory limit in Mi", item: res("c", "limits.memory", "1Mi"), want: "128"},
		{name: "cpu limit unset: allocatable", item: res("c", "limits.cpu", "1m"), want: "4000"},
		{name: "unknown container", item: res("nope", "limits.cpu", ""), wantErr: "downwardAPI f: container nope not found"},
		{name: "empty item", item: v1.DownwardAPIVolumeFile{Path: "f"}, wantErr: "neither fieldRef nor resourceFieldRef"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := downwardAPIPayload(basePod(), []v1.DownwardAPIVolumeFile{tc.item}, nil, alloc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got["f"].Data) != tc.want || got["f"].Mode != 0o644 {
				t.Errorf("f = %q mode %o, want %q mode 644", got["f"].Data, got["f"].Mode, tc.want)
			}
		})
	}
}

func TestDownwardAPIModes(t *testing.T) {
	items := []v1.DownwardAPIVolumeFile{
		{Path: "a", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		{Path: "b", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}, Mode: ptr(int32(0o400))},
	}
	got, err := downwardAPIPayload(basePod(), items, ptr(int32(0o440)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got["a"].Mode != 0o440 || got["b"].Mode != 0o400 {
		t.Errorf("modes a=%o b=%o, want 440 400", got["a"].Mode, got["b"].Mode)
	}
}
