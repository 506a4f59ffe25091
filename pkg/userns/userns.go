// Package userns gives pods with hostUsers: false their user namespace: a
// range of host IDs of their own, disjoint from every other pod's, onto
// which their IDs 0..idsPerPod-1 are mapped, as the kubelet does.
//
// The node's range is the kubelet's: the subordinate IDs of the user
// "kubelet" (/etc/subuid and /etc/subgid, which must give the same range)
// when that user exists, else every ID from 65536 up. It is cut into slots
// of idsPerPod IDs; each pod takes the first free slot and keeps it for
// its life. The choice is written into the pod's directory
// (<root-dir>/pods/<uid>/userns), read back when the agent starts, so a
// restarted agent gives running pods the same IDs and never hands a slot
// in use to another pod. A slot is free again once the pod's directory is
// gone (Release).
package userns

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// DefaultFirstID and DefaultLength are the node's range when no
	// "kubelet" user says otherwise: every ID but those below 65536,
	// which the host's own users and files are assumed to use.
	DefaultFirstID = 1 << 16
	DefaultLength  = 1<<32 - DefaultFirstID
	// DefaultIDsPerPod is userNamespaces.idsPerPod's default.
	DefaultIDsPerPod = 1 << 16
	// User is the user whose subordinate IDs are the node's range.
	User = "kubelet"
	// recordFile is the pod directory's file that holds its mapping.
	recordFile = "userns"
)

// Range is a range of host IDs.
type Range struct {
	First, Length uint32
}

// Mapping is a pod's user namespace: container IDs from 0 mapped onto
// host IDs from HostID, Length of them; the same for groups.
type Mapping struct {
	HostID, Length uint32
}

// CRI is the mapping as the runtime takes it (NamespaceOption.UsernsOptions).
func (m Mapping) CRI() *runtimeapi.UserNamespace {
	ids := []*runtimeapi.IDMapping{{HostId: m.HostID, ContainerId: 0, Length: m.Length}}
	gids := []*runtimeapi.IDMapping{{HostId: m.HostID, ContainerId: 0, Length: m.Length}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids, Gids: gids}
}

// record is the file in the pod's directory.
type record struct {
	UIDMappings []idMap `json:"uidMappings"`
	GIDMappings []idMap `json:"gidMappings"`
}

type idMap struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// Allocator hands out and remembers the pods' slots. It is safe for
// concurrent use.
type Allocator struct {
	podsDir string
	first   uint32 // the range's first ID
	slots   uint32 // how many pods the range holds
	perPod  uint32

	mu    sync.Mutex
	byPod map[types.UID]uint32 // pod → slot
	used  map[uint32]types.UID // slot → pod
}

// New makes the allocator of the node's range for pods under podsDir
// (<root-dir>/pods), idsPerPod IDs each, checking that the range holds
// maxPods pods, and reads back the mappings recorded in the pods'
// directories.
func New(podsDir string, r Range, idsPerPod int64, maxPods int) (*Allocator, error) {
	if err := ValidateIDsPerPod(idsPerPod); err != nil {
		return nil, err
	}
	per := uint32(idsPerPod)
	if r.First%per != 0 {
		return nil, fmt.Errorf("the first ID %d of the user %q's range is not a multiple of userNamespaces.idsPerPod (%d)", r.First, User, per)
	}
	if r.Length%per != 0 {
		return nil, fmt.Errorf("the length %d of the user %q's range is not a multiple of userNamespaces.idsPerPod (%d)", r.Length, User, per)
	}
	slots := r.Length / per
	if int64(slots) < int64(maxPods) {
		return nil, fmt.Errorf("the user %q's range of %d IDs holds %d pods of userNamespaces.idsPerPod %d IDs, fewer than maxPods (%d)",
			User, r.Length, slots, per, maxPods)
	}
	a := &Allocator{podsDir: podsDir, first: r.First, slots: slots, perPod: per,
		byPod: map[types.UID]uint32{}, used: map[uint32]types.UID{}}
	if err := a.load(); err != nil {
		return nil, err
	}
	return a, nil
}

// ValidateIDsPerPod checks userNamespaces.idsPerPod: a positive multiple
// of 65536 that fits the ID space.
func ValidateIDsPerPod(n int64) error {
	if n <= 0 || n%DefaultIDsPerPod != 0 || n > DefaultLength {
		return fmt.Errorf("userNamespaces.idsPerPod: %d must be a positive multiple of %d, at most %d", n, DefaultIDsPerPod, int64(DefaultLength))
	}
	return nil
}

// load reads the mappings recorded in the pods' directories. A record
// that does not fit the range (written under another configuration) is
// refused: the agent cannot vouch that a slot it would hand out is free.
func (a *Allocator) load() error {
	entries, err := os.ReadDir(a.podsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pods' user namespaces: %w", err)
	}
	for _, e := range entries {
		path := filepath.Join(a.podsDir, e.Name(), recordFile)
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		slot, err := a.parse(b)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		uid := types.UID(e.Name())
		if other, taken := a.used[slot]; taken {
			return fmt.Errorf("%s: pods %s and %s record the same user namespace", path, other, uid)
		}
		a.used[slot], a.byPod[uid] = uid, slot
	}
	return nil
}

// parse turns a record into its slot, checking it is one this allocator
// could have made.
func (a *Allocator) parse(b []byte) (uint32, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, err
	}
	if len(r.UIDMappings) != 1 || len(r.GIDMappings) != 1 || r.UIDMappings[0] != r.GIDMappings[0] {
		return 0, errors.New("want one mapping, the same for users and groups")
	}
	m := r.UIDMappings[0]
	if m.ContainerID != 0 || m.Length != a.perPod || m.HostID < a.first || (m.HostID-a.first)%a.perPod != 0 ||
		(m.HostID-a.first)/a.perPod >= a.slots {
		return 0, fmt.Errorf("mapping %+v is not a slot of the range from %d of %d pods of %d IDs", m, a.first, a.slots, a.perPod)
	}
	return (m.HostID - a.first) / a.perPod, nil
}

// Get returns the pod's mapping: the one it has, else a free slot,
// recorded in the pod's directory before it is returned.
func (a *Allocator) Get(uid types.UID) (Mapping, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if slot, ok := a.byPod[uid]; ok {
		return a.mapping(slot), nil
	}
	// The lowest free slot: few pods, so a scan from 0 is short.
	slot := uint32(0)
	for ; slot < a.slots; slot++ {
		if _, taken := a.used[slot]; !taken {
			break
		}
	}
	if slot == a.slots {
		return Mapping{}, fmt.Errorf("no user namespace left: all %d of the node's ranges are in use", a.slots)
	}
	m := a.mapping(slot)
	if err := a.write(uid, m); err != nil {
		return Mapping{}, err
	}
	a.used[slot], a.byPod[uid] = uid, slot
	return m, nil
}

func (a *Allocator) mapping(slot uint32) Mapping {
	return Mapping{HostID: a.first + slot*a.perPod, Length: a.perPod}
}

// write records the mapping in the pod's directory, atomically.
func (a *Allocator) write(uid types.UID, m Mapping) error {
	dir := filepath.Join(a.podsDir, string(uid))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("record the pod's user namespace: %w", err)
	}
	one := []idMap{{HostID: m.HostID, ContainerID: 0, Length: m.Length}}
	b, err := json.Marshal(record{UIDMappings: one, GIDMappings: one})
	if err != nil {
		return err
	}
	path := filepath.Join(dir, recordFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("record the pod's user namespace: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("record the pod's user namespace: %w", err)
	}
	return nil
}

// Release frees the pod's slot. Call it once the pod's directory, and
// its record with it, is gone.
func (a *Allocator) Release(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if slot, ok := a.byPod[uid]; ok {
		delete(a.byPod, uid)
		delete(a.used, slot)
	}
}

// InUse is how many pods hold a slot.
func (a *Allocator) InUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byPod)
}

// NodeRange is the node's range as the kubelet finds it: the subordinate
// IDs of the user "kubelet" when /etc/passwd has that user and
// /etc/subuid and /etc/subgid give it one range, the same for both; the
// default range when there is no such user or no entry for it. (The
// kubelet asks getsubids; the files are what getsubids reads on a host
// without an NSS subid module.)
func NodeRange(passwd, subuid, subgid string) (Range, error) {
	def := Range{First: DefaultFirstID, Length: DefaultLength}
	uid, found, err := lookupUser(passwd, User)
	if err != nil || !found {
		return def, err
	}
	uids, err := subIDs(subuid, User, uid)
	if err != nil {
		return Range{}, err
	}
	gids, err := subIDs(subgid, User, uid)
	if err != nil {
		return Range{}, err
	}
	if len(uids) == 0 && len(gids) == 0 {
		return def, nil
	}
	if len(uids) != 1 || len(gids) != 1 || uids[0] != gids[0] {
		return Range{}, fmt.Errorf("mismatched subuids and subgids for user %q: want one range, the same in %s and %s", User, subuid, subgid)
	}
	return uids[0], nil
}

// lookupUser finds name in a passwd file and returns its uid.
func lookupUser(passwd, name string) (string, bool, error) {
	f, err := os.Open(passwd)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) >= 3 && fields[0] == name {
			return fields[2], true, nil
		}
	}
	return "", false, s.Err()
}

// subIDs reads the ranges of a subuid or subgid file that belong to the
// user, named or by uid.
func subIDs(path, name, uid string) ([]Range, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Range
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) != 3 || (fields[0] != name && fields[0] != uid) {
			continue
		}
		first, err1 := strconv.ParseUint(fields[1], 10, 32)
		length, err2 := strconv.ParseUint(fields[2], 10, 32)
		if err := errors.Join(err1, err2); err != nil || length == 0 {
			return nil, fmt.Errorf("%s: bad entry %q", path, line)
		}
		out = append(out, Range{First: uint32(first), Length: uint32(length)})
	}
	return out, s.Err()
}
