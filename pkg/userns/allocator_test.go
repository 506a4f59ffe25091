package userns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/poddir"
)

// newTestAllocator makes an allocator of slots slots of 65536 IDs from 65536 under root,
// whose search for a free slot starts at slot 0, so that slots go in order.
func newTestAllocator(t *testing.T, root string, slots int) *Allocator {
	t.Helper()
	a, err := New(Config{RootDir: root, Range: Range{First: Unit, Length: uint32(slots) * Unit}, MaxPods: slots})
	if err != nil {
		t.Fatal(err)
	}
	a.pick = func(uint32) uint32 { return 0 }
	return a
}

func recordOf(root string, uid types.UID) string { return poddir.New(root).Pod(uid).UserNamespace() }

func TestAllocatorSlots(t *testing.T) {
	root := t.TempDir()
	a := newTestAllocator(t, root, 3)
	got := map[types.UID]Mapping{}
	for _, uid := range []types.UID{"a", "b", "c"} {
		m, err := a.Get(uid)
		if err != nil {
			t.Fatalf("Get(%s): %v", uid, err)
		}
		got[uid] = m
	}
	if got["a"] != (Mapping{HostID: 65536, Length: 65536}) || got["b"] != (Mapping{HostID: 131072, Length: 65536}) ||
		got["c"] != (Mapping{HostID: 196608, Length: 65536}) {
		t.Errorf("mappings %+v, want disjoint slots of 65536 IDs from 65536", got)
	}
	if again, err := a.Get("a"); err != nil || again != got["a"] {
		t.Errorf("a asked again: %+v %v, want %+v", again, err, got["a"])
	}
	_, err := a.Get("d")
	if want := "create user namespace: could not find an empty slot to allocate a user namespace"; err == nil || err.Error() != want {
		t.Errorf("a fourth pod in a range of three: %v, want %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(root, "pods", "d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused pod's directory: %v, want none made", err)
	}

	// b's directory goes: its slot is free for the next pod, and its record goes with it.
	if err := a.Release("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(recordOf(root, "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("b's record after its release: %v, want it removed", err)
	}
	if err := a.Release("b"); err != nil {
		t.Errorf("a second release: %v", err)
	}
	if m, err := a.Get("d"); err != nil || m != got["b"] {
		t.Errorf("d after b's release: %+v %v, want b's slot %+v", m, err, got["b"])
	}
	if a.InUse() != 3 {
		t.Errorf("%d pods hold a slot, want 3", a.InUse())
	}
	if _, err := a.Get("../escape"); err == nil {
		t.Error("a UID that is no directory name must be refused")
	}
}

// TestAllocatorPicksAtRandom: the search for a free slot starts where pick says and wraps
// round the range, as the kubelet's, so that a slot just freed is not the next one out.
func TestAllocatorPicksAtRandom(t *testing.T) {
	a := newTestAllocator(t, t.TempDir(), 4)
	a.pick = func(n uint32) uint32 {
		if n != 4 {
			t.Errorf("pick(%d), want the range's 4 slots", n)
		}
		return 2
	}
	var hosts []uint32
	for _, uid := range []types.UID{"a", "b", "c", "d"} {
		m, err := a.Get(uid)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, m.HostID)
	}
	want := []uint32{3 * Unit, 4 * Unit, 1 * Unit, 2 * Unit}
	for i := range want {
		if hosts[i] != want[i] {
			t.Fatalf("host IDs %v, want %v", hosts, want)
		}
	}
}

// TestAllocatorRestart: a new allocator (a restarted agent) reads the pods' records back,
// gives them the same mappings and hands their slots to no one else.
func TestAllocatorRestart(t *testing.T) {
	root := t.TempDir()
	a := newTestAllocator(t, root, 4)
	ma, _ := a.Get("a")
	mb, _ := a.Get("b")
	mc, _ := a.Get("c")
	if err := a.Release("b"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(recordOf(root, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}`; string(b) != want {
		t.Errorf("a's record %s, want %s", b, want)
	}
	// Other things under pods/: a pod of the host's user namespace, a stray file.
	if err := os.MkdirAll(filepath.Join(root, "pods", "hostpod"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "pods", "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	again := newTestAllocator(t, root, 4)
	if again.InUse() != 2 {
		t.Errorf("%d pods hold a slot after the restart, want a and c", again.InUse())
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
}

// TestAllocatorRefusesRecords: a record the allocator could not have made (another
// idsPerPod, another range, a slot two pods claim) stops the start: no slot can be vouched for.
func TestAllocatorRefusesRecords(t *testing.T) {
	rec := func(host, length uint32) string {
		m := fmt.Sprintf(`{"hostId":%d,"containerId":0,"length":%d}`, host, length)
		return `{"uidMappings":[` + m + `],"gidMappings":[` + m + `]}`
	}
	for _, tc := range []struct {
		name    string
		records map[string]string
		want    string
	}{
		{name: "off the slots", records: map[string]string{"p": rec(70000, Unit)}, want: "is no slot of the range"},
		{name: "another idsPerPod", records: map[string]string{"p": rec(2*Unit, 2*Unit)}, want: "is no slot of the range"},
		{name: "past the range", records: map[string]string{"p": rec(9*Unit, Unit)}, want: "is no slot of the range"},
		{name: "below the range", records: map[string]string{"p": rec(0, Unit)}, want: "is no slot of the range"},
		{name: "users and groups differ", records: map[string]string{"p": `{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}`},
			want: "the same for users and groups"},
		{name: "not JSON", records: map[string]string{"p": "garbage"}, want: "not a user namespace record"},
		{name: "one slot, two pods", records: map[string]string{"p": rec(Unit, Unit), "q": rec(Unit, Unit)}, want: "record the same user namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for uid, content := range tc.records {
				p := recordOf(root, types.UID(uid))
				if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := New(Config{RootDir: root, Range: Range{First: Unit, Length: 4 * Unit}, MaxPods: 4})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestNewChecksTheRange: the kubelet's checks of its range at start, with its words.
func TestNewChecksTheRange(t *testing.T) {
	for _, tc := range []struct {
		name      string
		r         Range
		idsPerPod int64
		maxPods   int
		want      string
	}{
		{name: "defaults", maxPods: 110},
		{name: "default range of a larger idsPerPod", idsPerPod: 2 * Unit, maxPods: 110},
		// 2^32 - 3*65536 is no multiple of 3*65536: the kubelet refuses it too.
		{name: "default range of an idsPerPod it does not divide", idsPerPod: 3 * Unit, maxPods: 110,
			want: "kubelet user assigned IDs length 4294770688 is not a multiple of 196608"},
		{name: "idsPerPod not a multiple of 65536", idsPerPod: 100000, maxPods: 110, want: "userNamespaces.idsPerPod must be a multiple of 65536"},
		{name: "idsPerPod below 65536", idsPerPod: 1000, maxPods: 110, want: "userNamespaces.idsPerPod must not be less than 65536"},
		{name: "first ID off the slots", r: Range{100000, Unit * 200}, maxPods: 110, want: "kubelet user assigned ID 100000 is not a multiple of 65536"},
		{name: "first ID maps root", r: Range{0, Unit * 200}, maxPods: 110, want: "kubelet user assigned ID 0 must be greater or equal to 65536"},
		{name: "first ID within the first slot of a larger idsPerPod", r: Range{0, 2 * Unit * 200}, idsPerPod: 2 * Unit, maxPods: 110,
			want: "kubelet user assigned ID 0 must be greater or equal to 131072"},
		{name: "length off the slots", r: Range{Unit, Unit*200 + 1}, maxPods: 110, want: "kubelet user assigned IDs length 13107201 is not a multiple of 65536"},
		{name: "too few for maxPods", r: Range{Unit, Unit * 100}, maxPods: 110, want: "kubelet user assigned IDs are not enough to support 110 pods"},
		{name: "exactly maxPods", r: Range{Unit, Unit * 110}, maxPods: 110},
		{name: "past the last ID", r: Range{1<<32 - Unit, 2 * Unit}, maxPods: 1, want: "go past the last ID 4294967295"},
		{name: "a subuid range of larger slots", r: Range{2 * Unit, 2 * Unit * 110}, idsPerPod: 2 * Unit, maxPods: 110},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{RootDir: t.TempDir(), Range: tc.r, IDsPerPod: tc.idsPerPod, MaxPods: tc.maxPods})
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestValidateIDsPerPod(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{n: 65536},
		{n: 1 << 20},
		{n: 1<<32 - Unit},
		{n: 0, want: "userNamespaces.idsPerPod must not be less than 65536"},
		{n: -65536, want: "userNamespaces.idsPerPod must not be less than 65536"},
		{n: 65535, want: "userNamespaces.idsPerPod must not be less than 65536"},
		{n: 65536 + 1, want: "userNamespaces.idsPerPod must be a multiple of 65536"},
		{n: 1 << 32, want: "userNamespaces.idsPerPod must not be more than 4294967295"},
	} {
		err := ValidateIDsPerPod(tc.n)
		if (tc.want == "") != (err == nil) || (err != nil && err.Error() != tc.want) {
			t.Errorf("ValidateIDsPerPod(%d) = %v, want %q", tc.n, err, tc.want)
		}
	}
}

func TestMappingCRI(t *testing.T) {
	got := Mapping{HostID: 131072, Length: 65536}.CRI()
	if got.Mode != runtimeapi.NamespaceMode_POD {
		t.Errorf("mode %v, want POD", got.Mode)
	}
	for what, ids := range map[string][]*runtimeapi.IDMapping{"uids": got.Uids, "gids": got.Gids} {
		if len(ids) != 1 || ids[0].HostId != 131072 || ids[0].ContainerId != 0 || ids[0].Length != 65536 {
			t.Errorf("%s %v, want 0..65535 onto 131072", what, ids)
		}
	}
	if got.Uids[0] == got.Gids[0] {
		t.Error("users and groups must not share one message: a runtime may change one")
	}
}

// TestAllocatorConcurrentGets: pods asking at once each get a slot of their own.
func TestAllocatorConcurrentGets(t *testing.T) {
	a, err := New(Config{RootDir: t.TempDir(), Range: Range{First: Unit, Length: 64 * Unit}, MaxPods: 64})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]Mapping, 64)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := a.Get(types.UID(fmt.Sprintf("pod-%d", i)))
			if err != nil {
				t.Error(err)
			}
			got[i] = m
		}()
	}
	wg.Wait()
	seen := map[uint32]bool{}
	for _, m := range got {
		if seen[m.HostID] || m.HostID < Unit || m.HostID%Unit != 0 {
			t.Fatalf("mappings %v: %d twice or off the slots", got, m.HostID)
		}
		seen[m.HostID] = true
	}
}
