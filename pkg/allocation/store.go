// Package allocation keeps what each pod's containers were given on this
// node: the resources admitted for them (allocated) and those last applied
// to their running containers (actuated). A pod's spec may ask for other
// resources later (an in-place resize); the allocation changes only once
// the node has room, and the actuated record only once the runtime has
// applied it. Both are checkpointed in the agent's root dir, so that a
// restarted agent neither applies a resize twice nor forgets one.
package allocation

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	gosync "sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Dir is the checkpoint directory in the root dir: one file a pod, <uid>.json, with what
// was allocated to its containers and what was last applied to them, so that a change
// rewrites one small file instead of every pod's (at 250 pods the whole-node files made
// the checkpoint a twentieth of the agent's CPU). The name differs from the kubelet's
// checkpoints (allocated_pods_state, actuated_pods_state), whose format is its own, so that
// an agent taking over a kubelet's root dir does not misread them.
const Dir = "nodeagent-allocations"

// The whole-node checkpoint files of earlier versions, in the root dir: read once, turned
// into Dir's files and removed.
const (
	legacyAllocatedFile = "nodeagent_allocated_pods.json"
	legacyActuatedFile  = "nodeagent_actuated_pods.json"
)

// Containers maps a container name (init and app containers share one
// namespace) to its resources.
type Containers map[string]v1.ResourceRequirements

// record is one pod's checkpoint file.
type record struct {
	Allocated Containers `json:"allocated,omitempty"`
	Actuated  Containers `json:"actuated,omitempty"`
}

// Store is safe for concurrent use.
type Store struct {
	dir string // the checkpoint directory; "" keeps everything in memory

	mu        gosync.Mutex
	allocated map[types.UID]Containers
	actuated  map[types.UID]Containers
}

// Open loads the checkpoints kept under the root dir root ("" for a store in memory
// only). The store returned is always usable: a checkpoint that cannot be read is
// reported and the pod started afresh, which is safe (a running pod is then taken to hold
// what its spec asks for, and its containers to have it applied).
func Open(root string) (*Store, error) {
	s := &Store{allocated: map[types.UID]Containers{}, actuated: map[types.UID]Containers{}}
	if root == "" {
		return s, nil
	}
	s.dir = filepath.Join(root, Dir)
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return s, fmt.Errorf("checkpoint dir: %w", err)
	}
	var errs []error
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		errs = append(errs, fmt.Errorf("checkpoint dir: %w", err))
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") { // a write cut short by a crash
			_ = os.Remove(filepath.Join(s.dir, name))
			continue
		}
		uid, ok := strings.CutSuffix(name, ".json")
		if !ok || e.IsDir() {
			continue
		}
		var r record
		data, err := os.ReadFile(filepath.Join(s.dir, name))
		if err == nil {
			err = json.Unmarshal(data, &r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("checkpoint %s: %w", name, err))
			continue
		}
		s.put(types.UID(uid), r)
	}
	errs = append(errs, s.convertLegacy(root))
	return s, errors.Join(errs...)
}

// put takes r as the pod's record in memory.
func (s *Store) put(uid types.UID, r record) {
	if r.Allocated != nil {
		s.allocated[uid] = r.Allocated
	}
	if r.Actuated != nil {
		s.actuated[uid] = r.Actuated
	}
}

// convertLegacy reads the whole-node files of earlier versions, if any, writes their pods
// (those without a file of their own) to Dir and removes them.
func (s *Store) convertLegacy(root string) error {
	var errs []error
	legacy := map[types.UID]record{}
	for _, f := range []struct {
		name      string
		allocated bool
	}{{legacyAllocatedFile, true}, {legacyActuatedFile, false}} {
		path := filepath.Join(root, f.name)
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var m map[types.UID]Containers
		if err == nil {
			err = json.Unmarshal(data, &m)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("checkpoint %s: %w", f.name, err))
		}
		for uid, c := range m {
			r := legacy[uid]
			if f.allocated {
				r.Allocated = c
			} else {
				r.Actuated = c
			}
			legacy[uid] = r
		}
		defer func() {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, r := range legacy {
		if _, ok := s.allocated[uid]; ok {
			continue
		}
		if _, ok := s.actuated[uid]; ok {
			continue
		}
		s.put(uid, r)
		if err := s.saveLocked(uid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FromSpec is the resources every init and app container of pod asks for.
func FromSpec(pod *v1.Pod) Containers {
	out := make(Containers, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			out[list[i].Name] = *list[i].Resources.DeepCopy()
		}
	}
	return out
}

// SameResources tells whether two containers' resources are the same as the API
// compares them (equality.Semantic: quantities by value, a nil map or list the same as an
// empty one), without its reflection: admission applies every running pod's allocation
// each time it judges a pod, so this runs pods × pods times while a node fills.
func SameResources(a, b v1.ResourceRequirements) bool {
	if !sameList(a.Limits, b.Limits) || !sameList(a.Requests, b.Requests) || len(a.Claims) != len(b.Claims) {
		return false
	}
	for i := range a.Claims {
		if a.Claims[i] != b.Claims[i] {
			return false
		}
	}
	return true
}

func sameList(a, b v1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, qa := range a {
		qb, ok := b[name]
		if !ok || qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}

// Allocated returns the pod's allocation, if it has one.
func (s *Store) Allocated(uid types.UID) (Containers, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.allocated[uid]
	return a, ok
}

// SetAllocated makes what pod's spec asks for its allocation.
func (s *Store) SetAllocated(pod *v1.Pod) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocated[pod.UID] = FromSpec(pod)
	return s.saveLocked(pod.UID)
}

// Actuated returns the resources last applied to the pod's container of
// that name, if any were recorded.
func (s *Store) Actuated(uid types.UID, name string) (v1.ResourceRequirements, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.actuated[uid][name]
	return r, ok
}

// ActuatedPod returns a copy of what was last applied to each of the
// pod's containers.
func (s *Store) ActuatedPod(uid types.UID) Containers {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(Containers, len(s.actuated[uid]))
	for name, r := range s.actuated[uid] {
		out[name] = *r.DeepCopy()
	}
	return out
}

// SetActuated records what was applied to the pod's container of that
// name. Recording what is already recorded writes nothing.
func (s *Store) SetActuated(uid types.UID, name string, r v1.ResourceRequirements) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.actuated[uid][name]; ok && SameResources(old, r) {
		return nil
	}
	if s.actuated[uid] == nil {
		s.actuated[uid] = Containers{}
	}
	s.actuated[uid][name] = *r.DeepCopy()
	return s.saveLocked(uid)
}

// Remove forgets a pod that is gone.
func (s *Store) Remove(uid types.UID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, a := s.allocated[uid]
	_, b := s.actuated[uid]
	if !a && !b {
		return nil
	}
	delete(s.allocated, uid)
	delete(s.actuated, uid)
	return s.saveLocked(uid)
}

// Retain forgets every pod keep says no to: pods that went while the
// agent was not running.
func (s *Store) Retain(keep func(types.UID) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	gone := map[types.UID]bool{}
	for _, m := range []map[types.UID]Containers{s.allocated, s.actuated} {
		for uid := range m {
			if !keep(uid) {
				gone[uid] = true
			}
		}
	}
	var errs []error
	for uid := range gone {
		delete(s.allocated, uid)
		delete(s.actuated, uid)
		errs = append(errs, s.saveLocked(uid))
	}
	return errors.Join(errs...)
}

// Apply returns pod with each container's resources as allocated, and
// whether its spec asks for something else (a resize not allocated yet).
// Without an allocation, or when nothing differs, pod itself is returned.
// Containers the allocation does not name keep their spec's resources.
func (s *Store) Apply(pod *v1.Pod) (*v1.Pod, bool) {
	alloc, ok := s.Allocated(pod.UID)
	if !ok {
		return pod, false
	}
	var out *v1.Pod
	for _, kind := range []func(*v1.Pod) []v1.Container{
		func(p *v1.Pod) []v1.Container { return p.Spec.InitContainers },
		func(p *v1.Pod) []v1.Container { return p.Spec.Containers },
	} {
		for i, c := range kind(pod) {
			r, ok := alloc[c.Name]
			if !ok || SameResources(r, c.Resources) {
				continue
			}
			if out == nil {
				out = pod.DeepCopy()
			}
			kind(out)[i].Resources = *r.DeepCopy()
		}
	}
	if out == nil {
		return pod, false
	}
	return out, true
}

// saveLocked writes the pod's checkpoint file whole, through a temporary file, so that a
// crash leaves the old one or the new one; a pod with nothing recorded has none. s.mu is
// held.
func (s *Store) saveLocked(uid types.UID) error {
	if s.dir == "" {
		return nil
	}
	if !safeName(string(uid)) {
		return fmt.Errorf("save checkpoint: pod UID %q is not a file name", uid)
	}
	path := filepath.Join(s.dir, string(uid)+".json")
	r := record{Allocated: s.allocated[uid], Actuated: s.actuated[uid]}
	if r.Allocated == nil && r.Actuated == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove checkpoint: %w", err)
		}
		return nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, "."+string(uid)+".*")
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	// No fsync: the rename keeps the file whole across a crash of the
	// agent, which is what this guards against; a crash of the machine
	// takes the containers with it.
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// safeName says whether a pod UID can name its checkpoint file: one path element, not a
// hidden file (a static pod's manifest, from a URL too, may set any UID).
func safeName(uid string) bool {
	return uid != "" && !strings.HasPrefix(uid, ".") && !strings.ContainsAny(uid, "/\\\x00")
}
