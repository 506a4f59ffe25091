// Package pleg holds the pod cache, the one place that knows what the
// runtime is doing, and keeps it current by relisting the runtime.
package pleg

import (
	"context"
	"iter"
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// Cache is the observed runtime state of every pod, as of the last
// relist of the whole runtime or, for a pod relisted alone since, of that
// pod's. Only the relist goroutine writes it; workers read it.
type Cache struct {
	mu    sync.Mutex
	pods  map[types.UID]*runtime.PodStatus
	stamp time.Time // start of the relist of the whole runtime that produced pods
	// podStamps are the starts of the relists of one pod since then.
	podStamps map[types.UID]time.Time
	updated   chan struct{} // closed and replaced on every update
}

func newCache() *Cache {
	return &Cache{pods: map[types.UID]*runtime.PodStatus{}, podStamps: map[types.UID]time.Time{}, updated: make(chan struct{})}
}

// set replaces the whole state with the result of a relist started at stamp.
func (c *Cache) set(pods map[types.UID]*runtime.PodStatus, stamp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods = pods
	c.stamp = stamp
	clear(c.podStamps)
	c.notifyLocked()
}

// setPod replaces one pod's state with the result of its relist started at
// stamp; nil when the runtime has nothing of it.
func (c *Cache) setPod(uid types.UID, s *runtime.PodStatus, stamp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == nil {
		delete(c.pods, uid)
	} else {
		c.pods[uid] = s
	}
	c.podStamps[uid] = stamp
	c.notifyLocked()
}

func (c *Cache) notifyLocked() {
	close(c.updated)
	c.updated = make(chan struct{})
}

// all is a copy of the state of every pod.
func (c *Cache) all() map[types.UID]*runtime.PodStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.pods)
}

// values yields the state of every pod, holding the cache's lock meanwhile:
// for a quick read of all of them without a copy.
func (c *Cache) values() iter.Seq[*runtime.PodStatus] {
	return func(yield func(*runtime.PodStatus) bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, s := range c.pods {
			if !yield(s) {
				return
			}
		}
	}
}

// size is the number of pods cached.
func (c *Cache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pods)
}

// wholeStamp is when the last relist of the whole runtime started.
func (c *Cache) wholeStamp() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stamp
}

// Get returns a pod's observed state (an empty one when the runtime has
// nothing of it) and the time of the relist it comes from.
func (c *Cache) Get(uid types.UID) (*runtime.PodStatus, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.podLocked(uid), c.stampLocked(uid)
}

// stampLocked is when the relist that the pod's state comes from started.
func (c *Cache) stampLocked(uid types.UID) time.Time {
	if t, ok := c.podStamps[uid]; ok && t.After(c.stamp) {
		return t
	}
	return c.stamp
}

func (c *Cache) podLocked(uid types.UID) *runtime.PodStatus {
	if s, ok := c.pods[uid]; ok {
		return s
	}
	return &runtime.PodStatus{PodRef: runtime.PodRef{UID: uid}}
}

// GetNewerThan waits until a relist of the pod (of the whole runtime or
// of the pod alone) that started after t has completed, and returns the
// pod's state from it. A worker that has just acted calls it so that it
// never decides twice from the same stale state.
func (c *Cache) GetNewerThan(ctx context.Context, uid types.UID, t time.Time) (*runtime.PodStatus, error) {
	for {
		c.mu.Lock()
		if c.stampLocked(uid).After(t) {
			s := c.podLocked(uid)
			c.mu.Unlock()
			return s, nil
		}
		ch := c.updated
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}

// Pods returns the observed state of every pod the runtime holds
// something of, and the start of the relist it comes from (zero before
// the first). The states are shared: callers must not modify them.
func (c *Cache) Pods() ([]*runtime.PodStatus, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*runtime.PodStatus, 0, len(c.pods))
	for _, p := range c.pods {
		out = append(out, p)
	}
	return out, c.stamp
}

// RunningContainers lists the IDs of the containers the cache has as
// running; ok is false before the first relist of the whole runtime.
func (c *Cache) RunningContainers() (ids []string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stamp.IsZero() {
		return nil, false
	}
	for _, p := range c.pods {
		for _, ct := range p.Containers {
			if ct.State == runtime.ContainerRunning {
				ids = append(ids, ct.ID)
			}
		}
	}
	return ids, true
}

// Has says whether the runtime holds something of the pod.
func (c *Cache) Has(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pods[uid]
	return ok
}

// UIDs returns every pod the runtime holds something of.
func (c *Cache) UIDs() []runtime.PodRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]runtime.PodRef, 0, len(c.pods))
	for _, p := range c.pods {
		out = append(out, p.PodRef)
	}
	return out
}
