package pleg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// A worker that has acted on its pod, and a container event, need that one pod relisted,
// not the node: at 250 pods a relist of the whole runtime after each of them was a fifth
// of the agent's CPU while pods started. The pod alone is listed by its UID label, which
// the runtime filters on its side; the whole runtime is still relisted every period (the
// fallback, and what finds objects nobody asked about).

// wholeRelistShare: when more than one pod in this many of those cached is pending, one
// relist of the whole runtime costs less than a relist of each.
const wholeRelistShare = 4

// pending is what was asked for since the last relist: pods by UID, and container events
// whose pod the event did not name (the runtime sends no sandbox status for an object
// already removed), by the object's ID.
type pending struct {
	mu   sync.Mutex
	pods map[types.UID]struct{}
	ids  map[string]struct{}
}

func (q *pending) add(uid types.UID, id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if uid != "" {
		if q.pods == nil {
			q.pods = map[types.UID]struct{}{}
		}
		q.pods[uid] = struct{}{}
		return
	}
	if id != "" {
		if q.ids == nil {
			q.ids = map[string]struct{}{}
		}
		q.ids[id] = struct{}{}
	}
}

// take returns what is pending and empties it.
func (q *pending) take() (map[types.UID]struct{}, map[string]struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	pods, ids := q.pods, q.ids
	q.pods, q.ids = nil, nil
	return pods, ids
}

// RelistPod asks for a relist of one pod now: a worker that has changed it in the runtime
// waits for it (Cache.GetNewerThan).
func (p *PLEG) RelistPod(uid types.UID) {
	p.pending.add(uid, "")
	select {
	case p.podKick <- struct{}{}:
	default:
	}
}

// relistPending relists the pods asked for since the last relist, each alone; or the
// whole runtime when an event's object is not one the PLEG knows the pod of, or when so
// many pods are pending that one relist costs less.
func (p *PLEG) relistPending(ctx context.Context) error {
	pods, ids := p.pending.take()
	for id := range ids {
		uid, ok := p.podOfObject(id)
		if !ok {
			return p.Relist(ctx)
		}
		if pods == nil {
			pods = map[types.UID]struct{}{}
		}
		pods[uid] = struct{}{}
	}
	if len(pods) == 0 {
		return nil
	}
	if len(pods) > 1 && len(pods)*wholeRelistShare > p.cache.size() {
		return p.Relist(ctx)
	}
	var errs []error
	for uid := range pods {
		if err := p.relistPod(ctx, uid); err != nil {
			errs = append(errs, err)
		}
	}
	p.countRuntime(p.cache.values())
	return errors.Join(errs...)
}

// podOfObject is the pod of a sandbox or container the PLEG has seen.
func (p *PLEG) podOfObject(id string) (types.UID, bool) {
	if e, ok := p.containers[id]; ok && e.pod != "" {
		return e.pod, true
	}
	if e, ok := p.sandboxes[id]; ok && e.pod != "" {
		return e.pod, true
	}
	return "", false
}

// relistPod reads one pod's sandboxes and containers, updates the cache and reports a
// change.
func (p *PLEG) relistPod(ctx context.Context, uid types.UID) error {
	start := p.cfg.Clock.Now()
	sel := map[string]string{runtime.LabelPodUID: string(uid)}
	sbs, err := p.cfg.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("relist pod %s: %w", uid, err)
	}
	cs, err := p.cfg.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("relist pod %s: %w", uid, err)
	}
	seenSB, seenC := map[string]sandboxEntry{}, map[string]containerEntry{}
	s := p.collect(ctx, sbs, cs, seenSB, seenC)[uid]
	old, _ := p.cache.Get(uid)
	// The pod's objects as last seen go; those seen now take their place.
	for _, sb := range old.Sandboxes {
		delete(p.sandboxes, sb.ID)
	}
	for _, c := range old.Containers {
		delete(p.containers, c.ID)
	}
	maps.Copy(p.sandboxes, seenSB)
	maps.Copy(p.containers, seenC)
	if len(old.Sandboxes)+len(old.Containers) == 0 {
		old = nil
	}
	p.cache.setPod(uid, s, start)
	if !sameState(old, s) {
		ref := runtime.PodRef{UID: uid}
		if s != nil {
			ref = s.PodRef
		} else if old != nil {
			ref = old.PodRef
		}
		p.cfg.OnChange(ref)
	}
	return nil
}
