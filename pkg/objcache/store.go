package objcache

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// objectStore is what one object's reflector writes to: at most that one
// object, and whether the first list has been seen. Objects of another
// name are ignored, so a watch that is wider than asked (a fake client
// ignores field selectors) still shows the one object.
type objectStore struct {
	name   string
	synced chan struct{} // closed by the first Replace

	mu     sync.Mutex
	obj    runtime.Object // nil while the object does not exist
	listed bool
	frozen bool // immutable: the watch is over, later writes are stale
}

var _ cache.ReflectorStore = (*objectStore)(nil)

func newObjectStore(name string) *objectStore {
	return &objectStore{name: name, synced: make(chan struct{})}
}

func (s *objectStore) set(obj interface{}, present bool) {
	o, ok := obj.(runtime.Object)
	if !ok || !s.ours(o) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen {
		return
	}
	if present {
		s.obj = o
	} else {
		s.obj = nil
	}
}

func (s *objectStore) ours(o runtime.Object) bool {
	m, err := meta.Accessor(o)
	return err == nil && m.GetName() == s.name
}

// Add records the object.
func (s *objectStore) Add(obj interface{}) error { s.set(obj, true); return nil }

// Update records the object.
func (s *objectStore) Update(obj interface{}) error { s.set(obj, true); return nil }

// Delete records that the object is gone.
func (s *objectStore) Delete(obj interface{}) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s.set(obj, false)
	return nil
}

// Replace takes a list: the object if it is in it, else nothing.
func (s *objectStore) Replace(list []interface{}, _ string) error {
	var found runtime.Object
	for _, item := range list {
		if o, ok := item.(runtime.Object); ok && s.ours(o) {
			found = o
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.frozen {
		s.obj = found
	}
	if !s.listed {
		s.listed = true
		close(s.synced)
	}
	return nil
}

// Resync has nothing to do: there are no handlers to replay to.
func (s *objectStore) Resync() error { return nil }

// get returns the object and whether it exists.
func (s *objectStore) get() (runtime.Object, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.obj, s.obj != nil
}

// freeze keeps what the store holds: an immutable object's watch is
// stopped and nothing it delivers after is taken.
func (s *objectStore) freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = true
}

// waitSynced waits at most d for the first list; false when it has not
// come, or ctx ended first.
func (s *objectStore) waitSynced(ctx context.Context, d time.Duration) bool {
	select {
	case <-s.synced:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.synced:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}
