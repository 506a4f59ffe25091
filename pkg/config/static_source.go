package config

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ReasonFailedValidation is the reason of the event for a manifest the
// agent cannot run, the kubelet's reason for a pod that fails validation.
const ReasonFailedValidation = "FailedValidation"

// Recorder records events.
type Recorder interface {
	Eventf(object kruntime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// staticSource is what the static pod sources (FileSource, HTTPSource)
// share: their handler, the pods last handed over, the loop that reads
// again every period, the step that hands over what changed between two
// reads, and the reporting of manifests that cannot be run. A source
// embeds it and brings its own read.
type staticSource struct {
	source   string // the pods' AnnotationSource
	what     string // what a manifest is in events: "manifest file"
	period   time.Duration
	clock    clock.WithTicker
	recorder Recorder
	nodeRef  *v1.ObjectReference

	mu      sync.Mutex
	handler Handler
	running bool
	synced  bool
	pods    map[types.UID]*v1.Pod

	// problems is where → the problem last reported; only the reading
	// goroutine uses it.
	problems map[string]string
}

// newStaticSource is the shared part of a source whose pods say source in
// AnnotationSource; clk defaults to the real clock.
func newStaticSource(source, what, nodeName string, period time.Duration, clk clock.WithTicker, rec Recorder) *staticSource {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &staticSource{
		source: source, what: what, period: period, clock: clk, recorder: rec,
		// The kubelet refers to its Node by name in events, its UID too.
		nodeRef:  &v1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)},
		pods:     map[types.UID]*v1.Pod{},
		problems: map[string]string{},
	}
}

// SetHandler names the handler given every static pod added and removed.
// It is called once, before Run.
func (s *staticSource) SetHandler(h Handler) error {
	if h == nil {
		return errors.New("config: nil handler")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.running:
		return errors.New("config: SetHandler after Run")
	case s.handler != nil:
		return errors.New("config: SetHandler called twice")
	}
	s.handler = h
	return nil
}

// HasSynced reports whether the source has been read once and its pods
// handed over.
func (s *staticSource) HasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Pods returns the static pods as last read, by name. They are shared and
// must not be modified.
func (s *staticSource) Pods() []*v1.Pod {
	s.mu.Lock()
	out := make([]*v1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		out = append(out, p)
	}
	s.mu.Unlock()
	sortPods(out)
	return out
}

// sortPods orders pods by namespace and name.
func sortPods(pods []*v1.Pod) {
	slices.SortFunc(pods, func(a, b *v1.Pod) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
}

// run calls read at once, then every period, until ctx ends. ctx's
// logger names the source.
func (s *staticSource) run(ctx context.Context, read func(context.Context, Handler)) error {
	s.mu.Lock()
	h, running := s.handler, s.running
	s.running = s.running || h != nil
	s.mu.Unlock()
	switch {
	case h == nil:
		return errors.New("config: Run before SetHandler")
	case running:
		return errors.New("config: Run called twice")
	}
	klog.FromContext(ctx).Info("Reading static pods", "period", s.period)
	t := s.clock.NewTicker(s.period)
	defer t.Stop()
	for {
		read(ctx, h)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// replace makes found, a read's pods without duplicate names, the
// source's pods: a pod whose UID was there already stays as it was; the
// others are new, stamped with the source and the time first seen. It
// hands over the pods that went, then those that came, and marks the
// source synced.
func (s *staticSource) replace(logger klog.Logger, h Handler, found []*v1.Pod) {
	now := s.clock.Now()
	s.mu.Lock()
	old := s.pods
	next := make(map[types.UID]*v1.Pod, len(found))
	var added []*v1.Pod
	for _, p := range found {
		if _, dup := next[p.UID]; dup {
			continue // a UID given in two manifests: the first read wins
		}
		if kept, ok := old[p.UID]; ok {
			next[p.UID] = kept
			continue
		}
		p.Annotations[AnnotationSource] = s.source
		p.Annotations[AnnotationSeen] = now.Format(time.RFC3339Nano)
		next[p.UID] = p
		added = append(added, p)
	}
	var removed []*v1.Pod
	for uid, p := range old {
		if _, ok := next[uid]; !ok {
			removed = append(removed, p)
		}
	}
	s.pods = next
	s.mu.Unlock()

	// Removals first: a changed manifest's old pod leaves before its new
	// one (same name) arrives.
	for _, p := range removed {
		logger.Info("Static pod removed", "pod", klog.KObj(p), "podUID", p.UID)
		h.RemovePod(p)
	}
	for _, p := range added {
		logger.Info("Static pod added", "pod", klog.KObj(p), "podUID", p.UID)
		h.UpsertPod(p)
	}
	s.mu.Lock()
	s.synced = true
	s.mu.Unlock()
}

// problem is a manifest that cannot be run: where it is and why.
type problem struct {
	where string // the file's path, the URL
	err   error
}

// report logs each problem and records a FailedValidation event on the
// Node, once per problem: not again at every read. A manifest missing
// from problems has none; the same problem coming back later is reported
// again.
func (s *staticSource) report(logger klog.Logger, problems []problem) {
	seen := map[string]bool{}
	for _, p := range problems {
		seen[p.where] = true
		msg := p.err.Error()
		if s.problems[p.where] == msg {
			continue
		}
		s.problems[p.where] = msg
		logger.Error(p.err, "Could not process static pod manifest", "manifest", p.where)
		if s.recorder != nil {
			s.recorder.Eventf(s.nodeRef, v1.EventTypeWarning, ReasonFailedValidation,
				"Could not process %s %s: %v", s.what, p.where, p.err)
		}
	}
	for where := range s.problems {
		if !seen[where] {
			delete(s.problems, where)
		}
	}
}
