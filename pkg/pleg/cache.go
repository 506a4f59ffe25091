// Package pleg holds the pod cache, the one place that knows what the
// runtime is doing, and keeps it current by relisting the runtime.
package pleg

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// Cache is the observed runtime state of every pod, as of the last
// relist. Only the relist goroutine writes it; workers read it.
type Cache struct {
	mu      sync.Mutex
	pods    map[types.UID]*runtime.PodStatus
	stamp   time.Time     // start of the relist that produced pods
	updated chan struct{} // closed and replaced on every update
}

func newCache() *Cache {
	return &Cache{pods: map[types.UID]*runtime.PodStatus{}, updated: make(chan struct{})}
}

// set replaces the whole state with the result of a relist started at stamp.
func (c *Cache) set(pods map[types.UID]*runtime.PodStatus, stamp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods = pods
	c.stamp = stamp
	close(c.updated)
	c.updated = make(chan struct{})
}

// Get returns a pod's observed state (an empty one when the runtime has
// nothing of it) and the time of the relist it comes from.
func (c *Cache) Get(uid types.UID) (*runtime.PodStatus, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.podLocked(uid), c.stamp
}

func (c *Cache) podLocked(uid types.UID) *runtime.PodStatus {
	if s, ok := c.pods[uid]; ok {
		return s
	}
	return &runtime.PodStatus{PodRef: runtime.PodRef{UID: uid}}
}

// GetNewerThan waits until a relist that started after t has completed,
// and returns the pod's state from it. A worker that has just acted calls
// it so that it never decides twice from the same stale state.
func (c *Cache) GetNewerThan(ctx context.Context, uid types.UID, t time.Time) (*runtime.PodStatus, error) {
	for {
		c.mu.Lock()
		if c.stamp.After(t) {
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
