package userns

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestAllocatorSlots(t *testing.T) {
	dir := t.TempDir()
	a, err := New(dir, Range{First: DefaultFirstID, Length: 3 * DefaultIDsPerPod}, DefaultIDsPerPod, 3)
	if err != nil {
		t.Fatal(err)
	}
	got := map[types.UID]Mapping{}
	for _, uid := range []types.UID{"a", "b", "c"} {
		m, err := a.Get(uid)
		if err != nil {
			t.Fatalf("Get(%s): %v", uid, err)
		}
		got[uid] = m
	}
	if got["a"] != (Mapping{HostID: 65536, Length: 65536}) || got["b"].HostID != 131072 || got["c"].HostID != 196608 {
		t.Errorf("mappings %+v, want consecutive slots from 65536", got)
	}
	if again, _ := a.Get("a"); again != got["a"] {
		t.Errorf("a's mapping changed: %+v, want %+v", again, got["a"])
	}
	if _, err := a.Get("d"); err == nil || !strings.Contains(err.Error(), "no user namespace left") {
		t.Errorf("a fourth pod in a range of three: %v", err)
	}
	// b's directory goes: its slot is the next pod's.
	a.Release("b")
	if m, err := a.Get("d"); err != nil || m != got["b"] {
		t.Errorf("d after b's release: %+v %v, want b's slot %+v", m, err, got["b"])
	}
	if a.InUse() != 3 {
		t.Errorf("%d pods in use, want 3", a.InUse())
	}
	cri := got["a"].CRI()
	if cri.Mode != runtimeapi.NamespaceMode_POD || len(cri.Uids) != 1 || cri.Uids[0].HostId != 65536 || cri.Uids[0].ContainerId != 0 ||
		cri.Uids[0].Length != 65536 || len(cri.Gids) != 1 || cri.Gids[0].HostId != 65536 {
		t.Errorf("CRI options %+v", cri)
	}
}

// TestAllocatorRestart: a new allocator (a restarted agent) reads the pods' records back,
// gives them the same mappings and hands their slots to no one else.
func TestAllocatorRestart(t *testing.T) {
	dir := t.TempDir()
	r := Range{First: DefaultFirstID, Length: 4 * DefaultIDsPerPod}
	a, err := New(dir, r, DefaultIDsPerPod, 4)
	if err != nil {
		t.Fatal(err)
	}
	ma, _ := a.Get("a")
	mb, _ := a.Get("b")
	mc, _ := a.Get("c")
	a.Release("b")
	if err := os.RemoveAll(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a", "userns")); err != nil || !strings.Contains(string(b), `"uidMappings"`) {
		t.Fatalf("a's record: %q %v", b, err)
	}

	again, err := New(dir, r, DefaultIDsPerPod, 4)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := again.Get("a"); m != ma {
		t.Errorf("a after the restart: %+v, want %+v", m, ma)
	}
	if m, _ := again.Get("c"); m != mc {
		t.Errorf("c after the restart: %+v, want %+v", m, mc)
	}
	if m, _ := again.Get("new"); m != mb {
		t.Errorf("a new pod after the restart: %+v, want the free slot %+v", m, mb)
	}

	// A record that is no slot of the range (another configuration) is refused.
	if err := os.MkdirAll(filepath.Join(dir, "odd"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "odd", "userns"), []byte(`{"uidMappings":[{"hostId":70000,"containerId":0,"length":65536}],"gidMappings":[{"hostId":70000,"containerId":0,"length":65536}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(dir, r, DefaultIDsPerPod, 4); err == nil || !strings.Contains(err.Error(), "not a slot") {
		t.Errorf("a record off the slots: %v", err)
	}
}

func TestNewChecksTheRange(t *testing.T) {
	for _, tc := range []struct {
		name      string
		r         Range
		idsPerPod int64
		maxPods   int
		want      string
	}{
		{name: "defaults", r: Range{DefaultFirstID, DefaultLength}, idsPerPod: DefaultIDsPerPod, maxPods: 110},
		{name: "idsPerPod not a multiple of 65536", r: Range{DefaultFirstID, DefaultLength}, idsPerPod: 1000, maxPods: 110, want: "multiple of 65536"},
		{name: "idsPerPod zero", r: Range{DefaultFirstID, DefaultLength}, idsPerPod: 0, maxPods: 110, want: "positive"},
		{name: "first ID off the slots", r: Range{100000, 65536 * 200}, idsPerPod: DefaultIDsPerPod, maxPods: 110, want: "first ID 100000"},
		{name: "length off the slots", r: Range{65536, 65536*200 + 1}, idsPerPod: DefaultIDsPerPod, maxPods: 110, want: "length"},
		{name: "too few for maxPods", r: Range{65536, 65536 * 100}, idsPerPod: DefaultIDsPerPod, maxPods: 110, want: "fewer than maxPods (110)"},
		{name: "bigger ranges", r: Range{131072, 131072 * 110}, idsPerPod: 131072, maxPods: 110},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(t.TempDir(), tc.r, tc.idsPerPod, tc.maxPods)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestNodeRange(t *testing.T) {
	write := func(t *testing.T, dir, name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const passwd = "root:x:0:0:root:/root:/bin/sh\nkubelet:x:999:999::/var/lib/kubelet:/usr/sbin/nologin\n"
	for _, tc := range []struct {
		name                   string
		passwd, subuid, subgid string
		want                   Range
		wantErr                string
	}{
		{name: "no kubelet user", passwd: "root:x:0:0:root:/root:/bin/sh\n", subuid: "kubelet:65536:7208960\n", subgid: "kubelet:65536:7208960\n",
			want: Range{DefaultFirstID, DefaultLength}},
		{name: "user without entries", passwd: passwd, subuid: "other:100000:65536\n", subgid: "",
			want: Range{DefaultFirstID, DefaultLength}},
		{name: "by name", passwd: passwd, subuid: "other:100000:65536\nkubelet:65536:7208960\n", subgid: "kubelet:65536:7208960\n",
			want: Range{65536, 7208960}},
		{name: "by uid", passwd: passwd, subuid: "999:131072:7208960\n", subgid: "999:131072:7208960\n", want: Range{131072, 7208960}},
		{name: "mismatched", passwd: passwd, subuid: "kubelet:65536:7208960\n", subgid: "kubelet:131072:7208960\n", wantErr: "mismatched subuids and subgids"},
		{name: "two ranges", passwd: passwd, subuid: "kubelet:65536:65536\nkubelet:200000:65536\n", subgid: "kubelet:65536:65536\n", wantErr: "mismatched"},
		{name: "bad entry", passwd: passwd, subuid: "kubelet:x:65536\n", subgid: "kubelet:65536:65536\n", wantErr: "bad entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			got, err := NodeRange(write(t, dir, "passwd", tc.passwd), write(t, dir, "subuid", tc.subuid), write(t, dir, "subgid", tc.subgid))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}
