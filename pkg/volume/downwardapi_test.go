package volume

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestDownwardAPIPayload(t *testing.T) {
	alloc := v1.ResourceList{v1.ResourceCPU: mustQ("4"), v1.ResourceMemory: mustQ("8Gi")}
	field := func(path string) v1.DownwardAPIVolumeFile {
		return v1.DownwardAPIVolumeFile{Path: "f", FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}
	}
	res := func(r, divisor string) v1.DownwardAPIVolumeFile {
		f := v1.DownwardAPIVolumeFile{Path: "f", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "c", Resource: r}}
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
		{name: "name", item: field("metadata.name"), want: "web"},
		{name: "namespace", item: field("metadata.namespace"), want: "ns"},
		{name: "uid", item: field("metadata.uid"), want: "uid-1"},
		{name: "labels", item: field("metadata.labels"), want: "app=\"web\"\ntier=\"front\""},
		{name: "annotations quoted", item: field("metadata.annotations"), want: `note="a \"quoted\" value"`},
		{name: "one label", item: field("metadata.labels['tier']"), want: "front"},
		{name: "env-only field refused", item: field("status.podIP"), wantErr: "unsupported fieldPath"},
		{name: "cpu request in millicores", item: res("requests.cpu", "1m"), want: "250"},
		{name: "cpu request rounds up", item: res("requests.cpu", ""), want: "1"},
		{name: "memory limit in Mi", item: res("limits.memory", "1Mi"), want: "128"},
		{name: "memory request in bytes", item: res("requests.memory", ""), want: "67108864"},
		{name: "cpu limit unset: allocatable", item: res("limits.cpu", ""), want: "4"},
		{name: "cpu limit unset in millicores", item: res("limits.cpu", "1m"), want: "4000"},
		{name: "unknown container", item: v1.DownwardAPIVolumeFile{Path: "f",
			ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "nope", Resource: "limits.cpu"}}, wantErr: `container "nope" not found`},
		{name: "bad resource", item: res("cpu", ""), wantErr: "unsupported container resource"},
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
