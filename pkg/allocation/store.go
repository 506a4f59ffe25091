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
	gosync "sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

// Checkpoint file names in the root dir. They differ from the kubelet's
// (allocated_pods_state, actuated_pods_state), whose format is its own,
// so that an agent taking over a kubelet's root dir does not misread
// them.
const (
	AllocatedFile = "nodeagent_allocated_pods.json"
	ActuatedFile  = "nodeagent_actuated_pods.json"
)

// Containers maps a container name (init and app containers share one
// namespace) to its resources.
type Containers map[string]v1.ResourceRequirements

// Store is safe for concurrent use.
type Store struct {
	dir string // "" keeps everything in memory

	mu        gosync.Mutex
	allocated map[types.UID]Containers
	actuated  map[types.UID]Containers
}

// Open loads the checkpoints kept in dir ("" for a store in memory only).
// A missing file is an empty one. The store returned is always usable: a
// checkpoint that cannot be read is reported and started afresh, which
// is safe (running pods are then taken to hold what their spec asks for,
// and their containers to have it applied).
func Open(dir string) (*Store, error) {
	s := &Store{dir: dir, allocated: map[types.UID]Containers{}, actuated: map[types.UID]Containers{}}
	if dir == "" {
		return s, nil
	}
	var errs []error
	for name, m := range map[string]*map[types.UID]Containers{AllocatedFile: &s.allocated, ActuatedFile: &s.actuated} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = json.Unmarshal(data, m)
		}
		if err != nil || *m == nil {
			*m = map[types.UID]Containers{}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("checkpoint %s: %w", name, err))
		}
	}
	return s, errors.Join(errs...)
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
	return s.saveLocked(AllocatedFile, s.allocated)
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
	if old, ok := s.actuated[uid][name]; ok && equality.Semantic.DeepEqual(old, r) {
		return nil
	}
	if s.actuated[uid] == nil {
		s.actuated[uid] = Containers{}
	}
	s.actuated[uid][name] = *r.DeepCopy()
	return s.saveLocked(ActuatedFile, s.actuated)
}

// Remove forgets a pod that is gone.
func (s *Store) Remove(uid types.UID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, a := s.allocated[uid]
	_, b := s.actuated[uid]
	delete(s.allocated, uid)
	delete(s.actuated, uid)
	var errs []error
	if a {
		errs = append(errs, s.saveLocked(AllocatedFile, s.allocated))
	}
	if b {
		errs = append(errs, s.saveLocked(ActuatedFile, s.actuated))
	}
	return errors.Join(errs...)
}

// Retain forgets every pod keep says no to: pods that went while the
// agent was not running.
func (s *Store) Retain(keep func(types.UID) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for name, m := range map[string]map[types.UID]Containers{AllocatedFile: s.allocated, ActuatedFile: s.actuated} {
		n := len(m)
		for uid := range m {
			if !keep(uid) {
				delete(m, uid)
			}
		}
		if len(m) != n {
			errs = append(errs, s.saveLocked(name, m))
		}
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
			if !ok || equality.Semantic.DeepEqual(r, c.Resources) {
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

// saveLocked writes one checkpoint whole, through a temporary file, so
// that a crash leaves the old one or the new one. s.mu is held.
func (s *Store) saveLocked(name string, m map[types.UID]Containers) error {
	if s.dir == "" {
		return nil
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, "."+name+".*")
	if err != nil {
		return fmt.Errorf("save %s: %w", name, err)
	}
	// No fsync: the rename keeps the file whole across a crash of the
	// agent, which is what this guards against; a crash of the machine
	// takes the containers with it.
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("save %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.dir, name)); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("save %s: %w", name, err)
	}
	return nil
}
