package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// Retry bounds for a failed status write.
const (
	retryInitial = 500 * time.Millisecond
	retryMax     = 30 * time.Second
	// parallelWrites bounds the writes in flight, so that many pods
	// starting at once all get their status out promptly.
	parallelWrites = 8
)

// Config configures a Manager.
type Config struct {
	// Client writes pods/status and confirms deletions.
	Client kube.Interface
	// Clock times retries and stamps start times; defaults to the real
	// clock.
	Clock clock.WithTicker
	// Metrics counts the container terminations the statuses show; nil
	// counts nothing.
	Metrics Metrics
	// Cached returns a pod as the agent's watch of its pods last saw it
	// (shared, never modified). A status write merges with it instead of
	// GETting the pod, as long as it is not older than the pod the
	// agent's own last write of that pod returned; nil always GETs.
	Cached func(namespace, name string) (*v1.Pod, bool)
}

// Manager is the one writer of pod statuses. Callers hand it the latest
// status of a pod; it coalesces, writes it as a patch with the pod UID as
// precondition, retries on failure, and never reverts a terminal phase.
type Manager struct {
	cfg Config
	// started is when the manager was made: a static pod's containers
	// that ended before then were seen ending by an earlier run.
	started time.Time
	mu      sync.Mutex
	pods    map[types.UID]*entry
	wake    chan struct{}
}

type entry struct {
	namespace, name string
	uid             types.UID
	// mirrorHash is set for a static pod: its status goes to the mirror
	// pod carrying this hash, never to any other pod of its name.
	mirrorHash     string
	status         v1.PodStatus
	version        uint64 // bumped by every Set
	written        uint64 // version last written
	deleteWhenDone bool
	retryAt        time.Time
	backoff        time.Duration
	// writtenVersion is the resourceVersion of the pod the agent's last
	// status patch returned: a cached pod older than that does not have
	// the agent's own last write and is not merged with.
	writtenVersion string
	// writtenPod is the pod that patch returned (its identity and status),
	// kept while the watch's copy is older: the next write merges with it
	// instead of reading the pod again (two writes in a row, the second
	// before the watch has delivered the first, are the rule while many
	// pods start).
	writtenPod *v1.Pod
}

// NewManager builds a Manager.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Client == nil {
		return nil, errors.New("status: Client is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	return &Manager{cfg: cfg, started: cfg.Clock.Now(), pods: map[types.UID]*entry{}, wake: make(chan struct{}, 1)}, nil
}

// Set records the pod's latest status to be written. It never blocks.
func (m *Manager) Set(pod *v1.Pod, st v1.PodStatus) {
	m.set(pod, st, false)
}

// SetFinal records the pod's final status; once written, the pod object
// is deleted (grace 0, UID precondition) if it is being deleted.
func (m *Manager) SetFinal(pod *v1.Pod, st v1.PodStatus) {
	m.set(pod, st, pod.DeletionTimestamp != nil)
}

func (m *Manager) set(pod *v1.Pod, st v1.PodStatus, del bool) {
	st = *st.DeepCopy()
	m.mu.Lock()
	e, ok := m.pods[pod.UID]
	m.stamp(pod, e, &st)
	m.countTerminations(pod, e, st)
	if !ok {
		e = &entry{namespace: pod.Namespace, name: pod.Name, uid: pod.UID}
		if isStatic(pod) {
			e.mirrorHash = pod.Annotations[annotationHash]
		}
		m.pods[pod.UID] = e
	} else if e.version == e.written && !del && !e.deleteWhenDone && apiequality.Semantic.DeepEqual(e.status, st) {
		// Already written: nothing new to say.
		m.mu.Unlock()
		return
	}
	e.status = st
	e.version++
	e.deleteWhenDone = e.deleteWhenDone || del
	e.retryAt = time.Time{}
	m.mu.Unlock()
	m.poke()
}

// stamp fills in what every status the kubelet writes carries: the pod
// generation it reflects, and a start time (a pod refused at admission
// gets one too). e is the pod's entry, nil for its first status. m.mu is
// held.
func (m *Manager) stamp(pod *v1.Pod, e *entry, st *v1.PodStatus) {
	st.ObservedGeneration = pod.Generation
	switch {
	case st.StartTime != nil:
	case e != nil && e.status.StartTime != nil:
		st.StartTime = e.status.StartTime.DeepCopy()
	case pod.Status.StartTime != nil:
		st.StartTime = pod.Status.StartTime.DeepCopy()
	default:
		now := metav1.NewTime(m.cfg.Clock.Now())
		st.StartTime = &now
	}
}

// countTerminations counts the containers st newly shows terminated, as
// against the pod's last status here or, for its first, the apiserver's:
// a restarted agent does not count again what it counted before. A static
// pod's file has no status; its first counts what ended since the manager
// started. m.mu is held.
func (m *Manager) countTerminations(pod *v1.Pod, e *entry, st v1.PodStatus) {
	old, notBefore := pod.Status, time.Time{}
	switch {
	case e != nil:
		old = e.status
	case isStatic(pod):
		notBefore = m.started
	}
	for _, t := range terminations(old, st, notBefore) {
		m.cfg.Metrics.ObserveContainerTerminated(t.containerType, t.exitCode, t.reason)
	}
}

// Forget drops a pod the agent is done with.
func (m *Manager) Forget(uid types.UID) {
	m.mu.Lock()
	delete(m.pods, uid)
	m.mu.Unlock()
}

func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run writes statuses until ctx ends: when one is set, and when a failed
// write's back-off ends. Nothing wakes it otherwise: an idle node's status
// manager sleeps (it ticked twice a second before).
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("status")
	ctx = klog.NewContext(ctx, logger)
	for {
		var due <-chan time.Time
		var timer clock.Timer
		if next := m.writeDue(ctx); !next.IsZero() {
			timer = m.cfg.Clock.NewTimer(max(next.Sub(m.cfg.Clock.Now()), 0))
			due = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-m.wake:
		case <-due:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// writeDue writes every status that changed since its last write and is
// not waiting out a retry back-off, and returns when the earliest of those
// waiting is due (zero if none waits).
func (m *Manager) writeDue(ctx context.Context) (next time.Time) {
	type job struct {
		e       *entry
		st      v1.PodStatus
		version uint64
		del     bool
	}
	now := m.cfg.Clock.Now()
	var jobs []job
	m.mu.Lock()
	for _, e := range m.pods {
		if e.version != e.written && !now.Before(e.retryAt) {
			jobs = append(jobs, job{e: e, st: *e.status.DeepCopy(), version: e.version, del: e.deleteWhenDone})
		}
	}
	m.mu.Unlock()
	sem := make(chan struct{}, parallelWrites)
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := m.write(ctx, j.e, j.st, j.del)
			m.mu.Lock()
			defer m.mu.Unlock()
			if errors.Is(err, errNoMirror) {
				// Not an error: the mirror pod is on its way (or the
				// apiserver is not); the status waits for it.
				klog.FromContext(ctx).V(4).Info("Static pod status waits for its mirror pod", "pod", klog.KRef(j.e.namespace, j.e.name))
				j.e.retryAt = m.cfg.Clock.Now().Add(mirrorWait)
				return
			}
			if err != nil {
				klog.FromContext(ctx).Info("Status write failed, will retry", "pod", klog.KRef(j.e.namespace, j.e.name), "err", err.Error())
				j.e.backoff = min(max(2*j.e.backoff, retryInitial), retryMax)
				j.e.retryAt = m.cfg.Clock.Now().Add(j.e.backoff)
				return
			}
			j.e.backoff = 0
			if j.e.written < j.version {
				j.e.written = j.version
			}
		}()
	}
	wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	now = m.cfg.Clock.Now()
	for _, e := range m.pods {
		if e.version == e.written {
			continue
		}
		at := e.retryAt
		if at.IsZero() {
			at = now // set while the writes ran: its wake-up is on the way too
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// errGone means the pod object is gone or was replaced: nothing to write.
var errGone = errors.New("pod is gone")

// errNoMirror means a static pod has no mirror pod of its hash yet.
var errNoMirror = errors.New("static pod has no mirror pod yet")

// mirrorWait is how long a static pod's status waits before it looks for
// its mirror pod again (a new status, too, looks at once).
const mirrorWait = 2 * time.Second

// The annotations that tell a static pod and its mirror pod, as the
// kubelet writes them.
const (
	annotationSource = "kubernetes.io/config.source"
	annotationHash   = "kubernetes.io/config.hash"
	annotationMirror = "kubernetes.io/config.mirror"
)

// isStatic: a pod from a manifest, whose object in the apiserver is its
// mirror pod.
func isStatic(pod *v1.Pod) bool {
	src, ok := pod.Annotations[annotationSource]
	return ok && src != "api"
}

func (m *Manager) write(ctx context.Context, e *entry, st v1.PodStatus, del bool) error {
	ns, name, uid := e.namespace, e.name, e.uid
	pods := m.cfg.Client.CoreV1().Pods(ns)
	cur, err := m.current(ctx, e)
	if e.mirrorHash != "" {
		// A static pod's status goes to its mirror pod, under the mirror
		// pod's UID, as the kubelet translates it; a mirror pod of
		// another hash belongs to another version of the file.
		switch {
		case apierrors.IsNotFound(err) || (err == nil && cur.Annotations[annotationMirror] != e.mirrorHash):
			return errNoMirror
		case err != nil:
			return fmt.Errorf("get mirror pod: %w", err)
		}
		uid = cur.UID
		del = false // the mirror pod's deletion is the mirror controller's
	} else if apierrors.IsNotFound(err) || (err == nil && cur.UID != uid) {
		m.Forget(uid)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get pod: %w", err)
	}
	merged := Merge(cur.Status, st)
	patch, err := statusPatch(uid, cur.Status, merged)
	if err != nil {
		return err
	}
	if string(patch) != "{}" {
		written, err := pods.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if err != nil {
			m.mu.Lock()
			e.writtenPod = nil // the next try reads the pod afresh
			m.mu.Unlock()
			if e.mirrorHash != "" && (apierrors.IsNotFound(err) || apierrors.IsConflict(err)) {
				return errNoMirror // the mirror pod was replaced meanwhile
			}
			if apierrors.IsNotFound(err) {
				m.Forget(uid)
				return nil
			}
			return fmt.Errorf("patch status: %w", err)
		}
		m.mu.Lock()
		e.writtenVersion = written.ResourceVersion
		if e.mirrorHash == "" {
			// What a merge reads of it: the identity and the status.
			e.writtenPod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: written.UID, ResourceVersion: written.ResourceVersion}, Status: written.Status}
		}
		m.mu.Unlock()
		klog.FromContext(ctx).V(3).Info("Wrote pod status", "pod", klog.KRef(ns, name), "phase", merged.Phase)
	}
	if del {
		grace := int64(0)
		err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("confirm delete: %w", err)
		}
		klog.FromContext(ctx).V(2).Info("Pod deleted", "pod", klog.KRef(ns, name), "podUID", uid)
		m.Forget(e.uid)
	}
	return nil
}

// current is the pod a status write merges with: the watch's copy when it
// is of the same pod and holds the agent's last write of it (its
// resourceVersion not older than the one that write returned), else (the
// watch's copy of the same pod, only older) what that write returned, else
// the apiserver's. A static pod's mirror pod is always read from the
// apiserver. The watch's copy and the written pod are shared and must not
// be modified.
func (m *Manager) current(ctx context.Context, e *entry) (*v1.Pod, error) {
	if m.cfg.Cached != nil && e.mirrorHash == "" {
		m.mu.Lock()
		written, writtenPod := e.writtenVersion, e.writtenPod
		m.mu.Unlock()
		pod, ok := m.cfg.Cached(e.namespace, e.name)
		if ok && pod.UID == e.uid {
			if notOlder(pod.ResourceVersion, written) {
				if writtenPod != nil {
					m.mu.Lock()
					if e.writtenPod == writtenPod {
						e.writtenPod = nil // the watch has caught up
					}
					m.mu.Unlock()
				}
				return pod, nil
			}
			if writtenPod != nil {
				return writtenPod, nil
			}
		}
	}
	return m.cfg.Client.CoreV1().Pods(e.namespace).Get(ctx, e.name, metav1.GetOptions{})
}

// notOlder says whether resourceVersion rv is at least written, "" being
// no write yet. Versions that do not compare (not the apiserver's
// integers) are taken as older, so the pod is read from the apiserver.
func notOlder(rv, written string) bool {
	if written == "" {
		return true
	}
	c, err := resourceversion.CompareResourceVersion(rv, written)
	return err == nil && c >= 0
}

// statusPatch is a strategic merge patch from old to st that also carries
// the pod UID, so the apiserver refuses it for a replaced pod.
func statusPatch(uid types.UID, old, st v1.PodStatus) ([]byte, error) {
	oldJSON, err := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: old})
	if err != nil {
		return nil, err
	}
	newJSON, err := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: st})
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("status patch: %w", err)
	}
	if string(patch) == "{}" {
		return patch, nil
	}
	var p map[string]any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, err
	}
	p["metadata"] = map[string]any{"uid": string(uid)}
	return json.Marshal(p)
}
