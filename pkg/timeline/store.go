// Package timeline keeps, for every pod on the node, the steps the agent
// took for it: admission, the pod cgroup, volumes, each image pull, the
// sandbox, each container's create and start, hooks, readiness, and the
// steps of its termination, each with its start, end, outcome and error.
// It is fed by the pod workers' one step-timing helper and read by the
// node API's debug paths (and through them by kubectl-nodeagent), so that
// "why is my pod slow / stuck" has an answer from the agent itself.
//
// Everything is in memory and bounded: a pod keeps at most MaxSteps steps
// (the first half of them, its start, and the latest), consecutive
// successes of one step (a volume refresh every minute) are folded into
// one, and a pod is forgotten Retention after it is gone.
package timeline

import (
	"errors"
	"sort"
	"strings"
	gosync "sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Defaults of Config.
const (
	DefaultMaxSteps  = 200
	DefaultRetention = 10 * time.Minute
	DefaultMaxPods   = 1000
)

// StepReady is the step recorded when the pod's Ready condition is first
// seen true.
const StepReady = "ready"

// Outcome is where a step stands.
type Outcome string

// Outcomes of a step.
const (
	InProgress Outcome = "inProgress"
	Done       Outcome = "done"
	Failed     Outcome = "failed"
)

// Pod names the pod a timeline belongs to.
type Pod struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// Step is one step of a pod's life as the agent took it.
type Step struct {
	// Name is the step as the agent logs it: admit, podCgroup, volumes,
	// pullImage:<container>, sandbox, createContainer:<container>, ...
	Name  string    `json:"step"`
	Start time.Time `json:"start"`
	// End is zero while the step is in progress.
	End             time.Time `json:"end,omitzero"`
	DurationSeconds float64   `json:"durationSeconds"`
	Outcome         Outcome   `json:"outcome"`
	// Error is the failure in the words of the component that gave it.
	Error string `json:"error,omitempty"`
	// Cached: an image pull step that found the image present.
	Cached bool `json:"cached,omitempty"`
	// Repeats counts the earlier successes of this step folded into this
	// one (see foldLocked).
	Repeats int `json:"repeats,omitempty"`

	id uint64
}

// Kind is the step's name without its container: createContainer for
// createContainer:app.
func (s Step) Kind() string {
	k, _, _ := strings.Cut(s.Name, ":")
	return k
}

// Waiting is why one container of the pod waits, from the last status
// computed for it.
type Waiting struct {
	Container string `json:"container"`
	Reason    string `json:"reason"`
	Message   string `json:"message,omitempty"`
}

// Status is what the last status computed for the pod says.
type Status struct {
	Phase   v1.PodPhase `json:"phase"`
	Ready   bool        `json:"ready"`
	Waiting []Waiting   `json:"waiting,omitempty"`
	// Observed is when that status was computed.
	Observed time.Time `json:"observed"`
}

// Timeline is the recorded life of one pod.
type Timeline struct {
	Pod
	FirstSeen time.Time `json:"firstSeen"`
	// Gone is when the agent was done with the pod; zero while it has it.
	Gone time.Time `json:"gone,omitzero"`
	// Dropped counts the steps left out between the start and the latest.
	Dropped int     `json:"dropped,omitempty"`
	Steps   []Step  `json:"steps"`
	Status  *Status `json:"status,omitempty"`
}

// StepObserver is told the duration of each finished step by kind
// (*metrics.Metrics is one).
type StepObserver interface {
	ObservePodStep(kind string, d time.Duration)
}

// Config configures a Store.
type Config struct {
	// MaxSteps bounds the steps kept per pod; defaults to DefaultMaxSteps.
	MaxSteps int
	// Retention is how long a pod is kept after it is gone; defaults to
	// DefaultRetention.
	Retention time.Duration
	// MaxPods bounds the pods kept: past it the longest gone (else the
	// least recently active) is dropped; defaults to DefaultMaxPods.
	MaxPods int
	// Clock reads the time for sweeps and for how long a step has run;
	// defaults to the real clock. Steps carry their own times.
	Clock clock.PassiveClock
	// Metrics observes each finished step; nil observes nothing.
	Metrics StepObserver
}

// Store holds the timelines of the node's pods. Its methods are safe for
// concurrent use.
type Store struct {
	cfg Config

	mu   gosync.Mutex
	pods map[types.UID]*podTimeline
}

type podTimeline struct {
	Timeline
	nextID     uint64
	readySeen  bool
	lastActive time.Time
}

// New validates cfg, fills its defaults and returns an empty Store.
func New(cfg Config) (*Store, error) {
	if cfg.MaxSteps < 0 || cfg.Retention < 0 || cfg.MaxPods < 0 {
		return nil, errors.New("timeline: MaxSteps, Retention and MaxPods must not be negative")
	}
	if cfg.MaxSteps == 0 {
		cfg.MaxSteps = DefaultMaxSteps
	}
	if cfg.MaxSteps < 2 {
		cfg.MaxSteps = 2
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.MaxPods == 0 {
		cfg.MaxPods = DefaultMaxPods
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Store{cfg: cfg, pods: map[types.UID]*podTimeline{}}, nil
}

// Begin records that a step of the pod started at; End with the returned
// id records how it ended.
func (s *Store) Begin(pod Pod, step string, at time.Time) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.podLocked(pod, at)
	p.nextID++
	s.appendLocked(p, Step{Name: step, Start: at, Outcome: InProgress, id: p.nextID})
	return p.nextID
}

// End records the end of the step Begin returned id for: done when err is
// nil, else failed with err's message. A step no longer kept is ignored.
func (s *Store) End(uid types.UID, id uint64, at time.Time, err error) {
	var observed *Step
	s.mu.Lock()
	if p := s.pods[uid]; p != nil {
		p.lastActive = at
		for i := len(p.Steps) - 1; i >= 0; i-- {
			st := &p.Steps[i]
			if st.id != id {
				continue
			}
			st.End, st.Outcome = at, Done
			if err != nil {
				st.Outcome, st.Error = Failed, err.Error()
			}
			done := *st
			observed = &done
			if err == nil {
				s.foldLocked(p, i)
			}
			break
		}
	}
	s.mu.Unlock()
	s.observe(observed)
}

// Record records a finished step: one that was not timed as it ran
// (admission) or took no time (an image found present). Its outcome
// follows its Error unless set.
func (s *Store) Record(pod Pod, st Step) {
	if st.Outcome == "" {
		st.Outcome = Done
		if st.Error != "" {
			st.Outcome = Failed
		}
	}
	if st.End.IsZero() {
		st.End = st.Start
	}
	s.mu.Lock()
	p := s.podLocked(pod, st.Start)
	p.nextID++
	st.id = p.nextID
	s.appendLocked(p, st)
	if st.Outcome == Done {
		s.foldLocked(p, len(p.Steps)-1)
	}
	s.mu.Unlock()
	if !st.Cached {
		s.observe(&st)
	}
}

// ObserveStatus takes the status just computed for the pod: it is kept
// for Why, and the first time its Ready condition is true the step
// "ready" is recorded.
func (s *Store) ObserveStatus(pod Pod, st *v1.PodStatus, at time.Time) {
	sum := &Status{Phase: st.Phase, Observed: at}
	for _, c := range st.Conditions {
		if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
			sum.Ready = true
		}
	}
	for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && w.Reason != "" {
				sum.Waiting = append(sum.Waiting, Waiting{Container: cs.Name, Reason: w.Reason, Message: w.Message})
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.podLocked(pod, at)
	p.Status = sum
	if sum.Ready && !p.readySeen {
		p.readySeen = true
		p.nextID++
		s.appendLocked(p, Step{Name: StepReady, Start: at, End: at, Outcome: Done, id: p.nextID})
	}
}

// Forget notes that the agent is done with the pod; it is dropped
// Retention later.
func (s *Store) Forget(uid types.UID, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pods[uid]; p != nil && p.Gone.IsZero() {
		p.Gone = at
	}
	s.sweepLocked()
}

// Get returns the timeline of the pod of that namespace and name: the one
// the agent still has, else the one it saw last.
func (s *Store) Get(namespace, name string) (Timeline, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked()
	var best *podTimeline
	for _, p := range s.pods {
		if p.Namespace != namespace || p.Name != name {
			continue
		}
		if best == nil || newer(p, best) {
			best = p
		}
	}
	if best == nil {
		return Timeline{}, false
	}
	return s.copyLocked(best), true
}

// newer orders two pods of one name: the one the agent still has, else
// the one first seen last.
func newer(a, b *podTimeline) bool {
	if a.Gone.IsZero() != b.Gone.IsZero() {
		return a.Gone.IsZero()
	}
	return a.FirstSeen.After(b.FirstSeen)
}

// copyLocked is a copy of the pod's timeline, with the durations of the
// steps in progress as of now.
func (s *Store) copyLocked(p *podTimeline) Timeline {
	t := p.Timeline
	t.Steps = append([]Step(nil), p.Steps...)
	now := s.cfg.Clock.Now()
	for i := range t.Steps {
		st := &t.Steps[i]
		end := st.End
		if end.IsZero() {
			end = now
		}
		st.DurationSeconds = max(end.Sub(st.Start), 0).Seconds()
	}
	if p.Status != nil {
		st := *p.Status
		st.Waiting = append([]Waiting(nil), p.Status.Waiting...)
		t.Status = &st
	}
	return t
}

// podLocked is the pod's timeline, made when new.
func (s *Store) podLocked(pod Pod, at time.Time) *podTimeline {
	p := s.pods[pod.UID]
	if p == nil {
		s.sweepLocked()
		s.makeRoomLocked()
		p = &podTimeline{Timeline: Timeline{Pod: pod, FirstSeen: at}}
		s.pods[pod.UID] = p
	}
	if p.Namespace == "" && p.Name == "" {
		p.Namespace, p.Name = pod.Namespace, pod.Name
	}
	p.lastActive = at
	return p
}

// appendLocked adds a step; past MaxSteps, the oldest step after the
// first half (the pod's start) makes room.
func (s *Store) appendLocked(p *podTimeline, st Step) {
	if len(p.Steps) >= s.cfg.MaxSteps {
		keep := s.cfg.MaxSteps / 2
		p.Steps = append(p.Steps[:keep], p.Steps[keep+1:]...)
		p.Dropped++
	}
	p.Steps = append(p.Steps, st)
}

// foldWindow is how far back a success looks for the same step to fold into: a
// pass of a running pod ensures a few things in turn (its cgroup, its volumes).
const foldWindow = 4

// foldLocked folds the successful step at i, the last, into a success of
// the same step right before it; or into the latest one among the few
// before it, when only successes lie between and that one is not the
// step's first success (the start's steps stay where they were): a
// running pod's passes (its cgroup and volumes ensured every minute) are
// a line each, not hundreds. The folded step moves to the end with the
// count.
func (s *Store) foldLocked(p *podTimeline, i int) {
	if i == 0 || i != len(p.Steps)-1 {
		return
	}
	cur := p.Steps[i]
	for j := i - 1; j >= 0 && j >= i-foldWindow; j-- {
		prev := p.Steps[j]
		if prev.Outcome != Done {
			return
		}
		if prev.Name != cur.Name {
			continue
		}
		if prev.Cached != cur.Cached || (j < i-1 && prev.Repeats == 0 && !doneBefore(p.Steps[:j], cur.Name)) {
			return
		}
		cur.Repeats = prev.Repeats + 1
		copy(p.Steps[j:], p.Steps[j+1:])
		p.Steps = p.Steps[:i]
		p.Steps[i-1] = cur
		return
	}
}

// doneBefore says whether steps hold a success of the step name.
func doneBefore(steps []Step, name string) bool {
	for _, st := range steps {
		if st.Name == name && st.Outcome == Done {
			return true
		}
	}
	return false
}

// sweepLocked drops the pods gone longer than Retention.
func (s *Store) sweepLocked() {
	now := s.cfg.Clock.Now()
	for uid, p := range s.pods {
		if !p.Gone.IsZero() && now.Sub(p.Gone) > s.cfg.Retention {
			delete(s.pods, uid)
		}
	}
}

// makeRoomLocked drops pods until a new one fits in MaxPods: the longest
// gone first, else the least recently active.
func (s *Store) makeRoomLocked() {
	if len(s.pods) < s.cfg.MaxPods {
		return
	}
	all := make([]*podTimeline, 0, len(s.pods))
	for _, p := range s.pods {
		all = append(all, p)
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Gone.IsZero() != b.Gone.IsZero() {
			return !a.Gone.IsZero()
		}
		if !a.Gone.IsZero() {
			return a.Gone.Before(b.Gone)
		}
		return a.lastActive.Before(b.lastActive)
	})
	for _, p := range all[:len(s.pods)-s.cfg.MaxPods+1] {
		delete(s.pods, p.UID)
	}
}

// observe hands a finished step's duration to the metrics.
func (s *Store) observe(st *Step) {
	if st == nil || s.cfg.Metrics == nil || st.Outcome == InProgress || st.Name == StepReady {
		return
	}
	s.cfg.Metrics.ObservePodStep(st.Kind(), max(st.End.Sub(st.Start), 0))
}
