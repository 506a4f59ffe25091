package hostpath

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestVolumeSize(t *testing.T) {
	const max = 100 << 30
	for _, tc := range []struct {
		name     string
		r        *csi.CapacityRange
		block    bool
		want     int64
		wantCode codes.Code
	}{
		{name: "mount without capacity is unknown", r: nil, want: 0},
		{name: "block without capacity gets the default", r: nil, block: true, want: defaultBlockSize},
		{name: "block default within the limit", r: &csi.CapacityRange{LimitBytes: 1 << 20}, block: true, want: 1 << 20},
		{name: "required bytes", r: &csi.CapacityRange{RequiredBytes: 10 << 30}, want: 10 << 30},
		{name: "required equals limit", r: &csi.CapacityRange{RequiredBytes: 5, LimitBytes: 5}, want: 5},
		{name: "required over limit", r: &csi.CapacityRange{RequiredBytes: 6, LimitBytes: 5}, wantCode: codes.InvalidArgument},
		{name: "negative", r: &csi.CapacityRange{RequiredBytes: -1}, wantCode: codes.InvalidArgument},
		{name: "over the maximum", r: &csi.CapacityRange{RequiredBytes: max + 1}, wantCode: codes.OutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := volumeSize(tc.r, tc.block, max)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("err = %v, want code %v", err, tc.wantCode)
			}
			if err == nil && got != tc.want {
				t.Errorf("size = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestSizeFits(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int64
		r    *csi.CapacityRange
		want bool
	}{
		{name: "no range", size: 0, r: nil, want: true},
		{name: "at least required", size: 10, r: &csi.CapacityRange{RequiredBytes: 10}, want: true},
		{name: "less than required", size: 9, r: &csi.CapacityRange{RequiredBytes: 10}, want: false},
		{name: "over the limit", size: 20, r: &csi.CapacityRange{RequiredBytes: 20, LimitBytes: 10}, want: false},
		{name: "unknown size, capacity asked", size: 0, r: &csi.CapacityRange{RequiredBytes: 1}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sizeFits(tc.size, tc.r); got != tc.want {
				t.Errorf("sizeFits(%d, %v) = %v", tc.size, tc.r, got)
			}
		})
	}
}

func TestTopologyAllows(t *testing.T) {
	seg := func(kv ...string) *csi.Topology { return &csi.Topology{Segments: map[string]string{kv[0]: kv[1]}} }
	for _, tc := range []struct {
		name string
		key  string
		req  *csi.TopologyRequirement
		want bool
	}{
		{name: "not topology-aware", key: "", req: &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("k", "other")}}, want: true},
		{name: "no requirement", key: "k", req: nil, want: true},
		{name: "preferred only", key: "k", req: &csi.TopologyRequirement{Preferred: []*csi.Topology{seg("k", "other")}}, want: true},
		{name: "requisite holds the node", key: "k", req: &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("k", "other"), seg("k", "n1")}}, want: true},
		{name: "requisite elsewhere", key: "k", req: &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("k", "other")}}, want: false},
		{name: "requisite of another key", key: "k", req: &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("zone", "n1")}}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := topologyAllows(tc.req, tc.key, "n1"); got != tc.want {
				t.Errorf("topologyAllows = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"csi-0123abcd": true, "fake-vol-id": true, "a.b_c": true,
		"": false, ".": false, "..": false, "../x": false, "a/b": false, stateFile: false,
		strings.Repeat("x", 129): false, "with space": false,
	} {
		if got := validID(id); got != want {
			t.Errorf("validID(%q) = %v, want %v", id, got, want)
		}
	}
	id, err := newVolumeID()
	if err != nil || !validID(id) || len(id) != 32 {
		t.Errorf("newVolumeID = %q, %v", id, err)
	}
}

func TestPageOf(t *testing.T) {
	all := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		name     string
		token    string
		max      int
		want     string
		wantNext string
		wantErr  bool
	}{
		{name: "all", want: "abcde"},
		{name: "first page", max: 2, want: "ab", wantNext: "2"},
		{name: "middle page", token: "2", max: 2, want: "cd", wantNext: "4"},
		{name: "last page", token: "4", max: 2, want: "e"},
		{name: "past the end of a shrunk list", token: "5", want: ""},
		{name: "beyond", token: "6", wantErr: true},
		{name: "not a number", token: "invalid-token", wantErr: true},
		{name: "negative", token: "-1", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, next, err := pageOf(all, tc.token, tc.max)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if got := strings.Join(page, ""); err == nil && (got != tc.want || next != tc.wantNext) {
				t.Errorf("page %q next %q, want %q %q", got, next, tc.want, tc.wantNext)
			}
		})
	}
}
