package hostpath

import (
	"reflect"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// capOf builds a capability; block selects the access type.
func capOf(mode csi.VolumeCapability_AccessMode_Mode, block bool, flags ...string) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if block {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}}
	}
	return c
}

const (
	rwo  = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	rwop = csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	rox  = csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	rwx  = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
)

func TestCheckCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name    string
		caps    []*csi.VolumeCapability
		want    accessType
		wantErr string
	}{
		{name: "mount", caps: []*csi.VolumeCapability{capOf(rwo, false)}, want: accessMount},
		{name: "block", caps: []*csi.VolumeCapability{capOf(rwop, true)}, want: accessBlock},
		{name: "none", caps: nil, wantErr: "missing"},
		{name: "nil entry", caps: []*csi.VolumeCapability{nil}, wantErr: "missing"},
		{name: "no access type", caps: []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwo}}}, wantErr: "neither mount nor block"},
		{name: "no access mode", caps: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}}, wantErr: "no access mode"},
		{name: "multi-node", caps: []*csi.VolumeCapability{capOf(rwx, false)}, wantErr: "not supported"},
		{name: "mixed types", caps: []*csi.VolumeCapability{capOf(rwo, false), capOf(rwo, true)}, wantErr: "both block and mount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkCapabilities(tc.caps)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("= %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestBindOptions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		c        *csi.VolumeCapability
		readOnly bool
		want     []string
	}{
		{name: "plain", c: capOf(rwo, false), want: []string{}},
		{name: "readonly request", c: capOf(rwo, false), readOnly: true, want: []string{"ro"}},
		{name: "reader-only mode", c: capOf(rox, false), want: []string{"ro"}},
		{name: "flags kept, fs options dropped, no duplicates", c: capOf(rwo, false, "noexec", "ro", "nosuid", "discard"), readOnly: true,
			want: []string{"noexec", "nosuid", "ro"}},
		{name: "block readonly", c: capOf(rwo, true), readOnly: true, want: []string{"ro"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bindOptions(tc.c, tc.readOnly); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("bindOptions = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPublishConflict(t *testing.T) {
	published := func(single bool) *volume {
		return &volume{ID: "v", Published: map[string]publication{"/a": {SingleWriter: single}}}
	}
	for _, tc := range []struct {
		name   string
		v      *volume
		target string
		c      *csi.VolumeCapability
		want   bool
	}{
		{name: "unpublished", v: &volume{ID: "v"}, target: "/b", c: capOf(rwop, false)},
		{name: "second target, multi writer", v: published(false), target: "/b", c: capOf(rwo, false)},
		{name: "same target again, single writer", v: published(true), target: "/a", c: capOf(rwop, false)},
		{name: "second target asks for single writer", v: published(false), target: "/b", c: capOf(rwop, false), want: true},
		{name: "second target of a single-writer volume", v: published(true), target: "/b", c: capOf(rwo, false), want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := publishConflict(tc.v, tc.target, tc.c); (got != "") != tc.want {
				t.Errorf("publishConflict = %q, want conflict %v", got, tc.want)
			}
		})
	}
}
