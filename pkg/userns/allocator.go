// Package userns gives pods with hostUsers: false a user namespace of
// their own, as the kubelet does: a slot of host IDs no other pod has,
// onto which the pod's IDs 0..idsPerPod-1 are mapped, the same for users
// and groups, so that root inside is an unprivileged user outside.
//
// The node's range (NodeRange) is cut into slots of idsPerPod IDs. A pod
// takes a free slot when it first asks and keeps it for its life. The
// slot is written into the pod's directory (<root-dir>/pods/<uid>/userns,
// the kubelet's file) before the pod is told of it, and the records of
// the pods found on disk are read back when the agent starts: a restarted
// agent gives running pods the same IDs and hands a slot in use to no
// other pod. A slot is free again when the pod's directory is removed
// (Release).
package userns

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/poddir"
)

const (
	// Unit is the granularity of userNamespaces.idsPerPod: every pod gets
	// a multiple of 65536 IDs, so that any 16-bit ID a container image
	// uses exists inside.
	Unit = 1 << 16
	// DefaultIDsPerPod is userNamespaces.idsPerPod's default.
	DefaultIDsPerPod = Unit
)

// ValidateIDsPerPod checks userNamespaces.idsPerPod as the kubelet's
// configuration validation does, with its words (which it prefixes with
// "invalid configuration: ").
func ValidateIDsPerPod(n int64) error {
	switch {
	case n < Unit:
		return fmt.Errorf("userNamespaces.idsPerPod must not be less than %d", Unit)
	case n%Unit != 0:
		return fmt.Errorf("userNamespaces.idsPerPod must be a multiple of %d", Unit)
	case n > math.MaxUint32:
		return fmt.Errorf("userNamespaces.idsPerPod must not be more than %d", int64(math.MaxUint32))
	}
	return nil
}

// Mapping is a pod's user namespace: container IDs from 0 mapped onto
// host IDs from HostID, Length of them; the same for groups.
type Mapping struct {
	HostID, Length uint32
}

// CRI is the mapping as the runtime takes it (NamespaceOption.UsernsOptions).
func (m Mapping) CRI() *runtimeapi.UserNamespace {
	ids := func() []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{HostId: m.HostID, ContainerId: 0, Length: m.Length}}
	}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids(), Gids: ids()}
}

// Config is what an Allocator is made from.
type Config struct {
	// RootDir is the agent's root directory (--root-dir): the pods'
	// records are in <RootDir>/pods/<uid>/userns.
	RootDir string
	// IDsPerPod is userNamespaces.idsPerPod; zero is the default, 65536.
	IDsPerPod int64
	// Range is the node's range (NodeRange); the zero Range is the
	// kubelet's default for IDsPerPod (DefaultRange).
	Range Range
	// MaxPods is maxPods: the range must hold that many pods.
	MaxPods int
}

// Allocator hands out and remembers the pods' slots. It is safe for
// concurrent use.
type Allocator struct {
	layout poddir.Layout
	first  uint32 // the range's first ID
	perPod uint32
	slots  uint32 // how many pods the range holds
	// pick returns a number in [0, n): where the search for a free slot
	// starts.
	pick func(n uint32) uint32

	mu    sync.Mutex
	byPod map[types.UID]uint32 // pod → slot
	used  map[uint32]types.UID // slot → pod
}

// New checks the configuration as the kubelet checks its user-namespace
// range at start, with its words, then reads back the mappings recorded
// in the pods' directories. An error should stop the agent, as it stops
// the kubelet: the agent cannot vouch for any slot it would hand out.
func New(cfg Config) (*Allocator, error) {
	if cfg.IDsPerPod == 0 {
		cfg.IDsPerPod = DefaultIDsPerPod
	}
	if err := ValidateIDsPerPod(cfg.IDsPerPod); err != nil {
		return nil, err
	}
	per := uint32(cfg.IDsPerPod)
	r := cfg.Range
	if r == (Range{}) {
		r = DefaultRange(per)
	}
	switch {
	case r.First%per != 0:
		return nil, fmt.Errorf("kubelet user assigned ID %d is not a multiple of %d", r.First, per)
	case r.First < per:
		// The host's own IDs, root first, are below: never map them.
		return nil, fmt.Errorf("kubelet user assigned ID %d must be greater or equal to %d", r.First, per)
	case r.Length%per != 0:
		return nil, fmt.Errorf("kubelet user assigned IDs length %d is not a multiple of %d", r.Length, per)
	case uint64(r.First)+uint64(r.Length) > 1<<32:
		// The kubelet does not check this; its slots past the last ID
		// would wrap round to the host's own IDs.
		return nil, fmt.Errorf("kubelet user assigned IDs from %d, %d of them, go past the last ID %d", r.First, r.Length, uint32(math.MaxUint32))
	case int64(r.Length/per) < int64(cfg.MaxPods):
		return nil, fmt.Errorf("kubelet user assigned IDs are not enough to support %d pods", cfg.MaxPods)
	}
	a := &Allocator{
		layout: poddir.New(cfg.RootDir), first: r.First, perPod: per, slots: r.Length / per,
		pick:  rand.Uint32N,
		byPod: map[types.UID]uint32{}, used: map[uint32]types.UID{},
	}
	if err := a.load(); err != nil {
		return nil, err
	}
	return a, nil
}

// load reads the mappings recorded in the pods' directories.
func (a *Allocator) load() error {
	entries, err := os.ReadDir(a.layout.PodsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pods' user namespaces: %w", err)
	}
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.IsDir() || !poddir.ValidUID(uid) {
			continue
		}
		path := a.layout.Pod(uid).UserNamespace()
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a pod of the host's user namespace
		}
		if err != nil {
			return fmt.Errorf("read the user namespace of pod %s: %w", uid, err)
		}
		slot, err := a.parse(b)
		if err != nil {
			return fmt.Errorf("the user namespace of pod %s (%s): %w", uid, path, err)
		}
		if other, taken := a.used[slot]; taken {
			return fmt.Errorf("pods %s and %s record the same user namespace (host IDs from %d)", other, uid, a.mapping(slot).HostID)
		}
		a.used[slot], a.byPod[uid] = uid, slot
	}
	return nil
}

// record is the file in the pod's directory. Its fields are those of the
// kubelet's file, so that either agent reads the other's pods on a node
// moved from one to the other.
type record struct {
	UIDs []idRange `json:"uidMappings"`
	GIDs []idRange `json:"gidMappings"`
}

type idRange struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// parse turns a record into its slot, checking that it is one this
// allocator could have made: one mapping from container ID 0, the same
// for users and groups, a whole slot of the range. A record written under
// another idsPerPod or range is refused.
func (a *Allocator) parse(b []byte) (uint32, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("not a user namespace record: %w", err)
	}
	if len(r.UIDs) != 1 || len(r.GIDs) != 1 || r.UIDs[0] != r.GIDs[0] {
		return 0, errors.New("want one mapping, the same for users and groups")
	}
	m := r.UIDs[0]
	if m.ContainerID != 0 || m.Length != a.perPod || m.HostID < a.first || (m.HostID-a.first)%a.perPod != 0 ||
		(m.HostID-a.first)/a.perPod >= a.slots {
		return 0, fmt.Errorf("the mapping of %d IDs from container ID %d onto host ID %d is no slot of the range from %d of %d pods of %d IDs",
			m.Length, m.ContainerID, m.HostID, a.first, a.slots, a.perPod)
	}
	return (m.HostID - a.first) / a.perPod, nil
}

// Get returns the pod's mapping: the one it has, else a free slot,
// recorded in the pod's directory before it is returned.
func (a *Allocator) Get(uid types.UID) (Mapping, error) {
	if !poddir.ValidUID(uid) {
		return Mapping{}, fmt.Errorf("invalid pod UID %q", uid)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if slot, ok := a.byPod[uid]; ok {
		return a.mapping(slot), nil
	}
	slot, ok := a.free()
	if !ok {
		return Mapping{}, errors.New("create user namespace: could not find an empty slot to allocate a user namespace")
	}
	m := a.mapping(slot)
	if err := a.write(uid, m); err != nil {
		return Mapping{}, fmt.Errorf("create user namespace: %w", err)
	}
	a.used[slot], a.byPod[uid] = uid, slot
	return m, nil
}

// free finds a free slot, searching from a random one as the kubelet
// does: a slot just released is seldom handed out again at once, so a
// file a gone pod left behind (on a hostPath, say) rarely belongs to the
// next pod's IDs.
func (a *Allocator) free() (uint32, bool) {
	if uint64(len(a.used)) >= uint64(a.slots) {
		return 0, false
	}
	start := a.pick(a.slots)
	for i := uint32(0); i < a.slots; i++ {
		slot := start + i
		if slot >= a.slots {
			slot -= a.slots
		}
		if _, taken := a.used[slot]; !taken {
			return slot, true
		}
	}
	return 0, false
}

func (a *Allocator) mapping(slot uint32) Mapping {
	return Mapping{HostID: a.first + slot*a.perPod, Length: a.perPod}
}

// write records the mapping in the pod's directory, atomically and
// durably: a record lost in a crash would let the slot go to another pod
// while this one still runs in it.
func (a *Allocator) write(uid types.UID, m Mapping) error {
	pd := a.layout.Pod(uid)
	if err := os.MkdirAll(pd.Dir(), poddir.DirMode); err != nil {
		return fmt.Errorf("record the pod's user namespace: %w", err)
	}
	one := []idRange{{HostID: m.HostID, ContainerID: 0, Length: m.Length}}
	b, err := json.Marshal(record{UIDs: one, GIDs: one})
	if err != nil {
		return err
	}
	path := pd.UserNamespace()
	tmp, err := os.CreateTemp(pd.Dir(), ".userns-*")
	if err != nil {
		return fmt.Errorf("record the pod's user namespace: %w", err)
	}
	defer os.Remove(tmp.Name()) // once renamed, this fails harmlessly
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		err = syncDir(pd.Dir())
	}
	if err != nil {
		return fmt.Errorf("record the pod's user namespace: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Release frees the pod's slot and removes its record, as the kubelet
// does once the pod has ended. Call it when the pod's directory is gone,
// or when nothing of the pod runs any more. A pod without a slot is
// success.
func (a *Allocator) Release(uid types.UID) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	slot, ok := a.byPod[uid]
	if !ok {
		return nil
	}
	// The record goes first: while it stays, the slot stays the pod's, as
	// the next agent would find it.
	if err := os.Remove(a.layout.Pod(uid).UserNamespace()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("release the user namespace of pod %s: %w", uid, err)
	}
	delete(a.byPod, uid)
	delete(a.used, slot)
	return nil
}

// InUse is how many pods hold a slot.
func (a *Allocator) InUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byPod)
}
