package timeline

import (
	"context"
	"strings"
	gosync "sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SpanPodStart names the span of a pod's start: from the start of its
// admission to the first status that shows it ready (or ended).
const SpanPodStart = "podStart"

// SpanPodTermination names the span of a pod's termination: from the
// pass that first acts to end the pod (its deletion, eviction, deadline
// or restart policy seen) to the first that finds nothing left to do
// for it, its containers stopped and its final status handed on.
const SpanPodTermination = "podTermination"

// TracerScope is the instrumentation scope of the agent's own spans.
const TracerScope = "github.com/nodeagent/nodeagent/pkg/timeline"

// Attributes of the spans besides the pod's, which carry the keys the
// kubelet's syncPod span does (k8s.pod.uid, k8s.pod, k8s.pod.name,
// k8s.namespace.name).
const (
	// AttrStartOutcome is how a pod's start ended: ready, succeeded,
	// failed, refused (by admission) or stopped (the pod began to end).
	AttrStartOutcome = attribute.Key("nodeagent.pod.start.outcome")
	// AttrStep is the step's full name as the timeline shows it
	// (createContainer:app).
	AttrStep = attribute.Key("nodeagent.step")
	// AttrImageCached marks an image pull step that found the image on
	// the node.
	AttrImageCached = attribute.Key("nodeagent.image.cached")
	// AttrEndReason is why a pod's termination began (an End* value).
	AttrEndReason = attribute.Key("nodeagent.pod.termination.reason")
	// AttrEndOutcome is how a pod's termination ended (an Ended* value).
	AttrEndOutcome = attribute.Key("nodeagent.pod.termination.outcome")
	// AttrGracePeriod is the grace period, in seconds, the pass that
	// began a pod's termination stopped its containers within.
	AttrGracePeriod = attribute.Key("nodeagent.pod.termination.grace_period_seconds")
)

// Outcomes of a pod's start (AttrStartOutcome).
const (
	StartReady     = "ready"
	StartSucceeded = "succeeded"
	StartFailed    = "failed"
	StartRefused   = "refused"
	StartStopped   = "stopped"
	// StartAbandoned: the pod's worker stopped (the agent is stopping)
	// before the pod was ready.
	StartAbandoned = "abandoned"
)

// Reasons a pod's termination begins (AttrEndReason).
const (
	// EndDeleted: the pod's graceful deletion began.
	EndDeleted = "deleted"
	// EndRemoved: the pod left the source (deleted at once, a static
	// pod's file removed) or was never in it (an orphan).
	EndRemoved = "removed"
	// EndEvicted: the eviction manager ended the pod.
	EndEvicted = "evicted"
	// EndDeadlineExceeded: the pod ran past activeDeadlineSeconds.
	EndDeadlineExceeded = "deadlineExceeded"
	// EndCompleted: the pod's restart policy ended it, every container
	// done for good.
	EndCompleted = "completed"
	// EndRejected: admission refused the pod.
	EndRejected = "rejected"
	// EndFoundEnded: the apiserver shows the pod ended (an earlier run of
	// the agent ended it).
	EndFoundEnded = "foundEnded"
)

// Outcomes of a pod's termination (AttrEndOutcome).
const (
	// EndedKept: nothing of the pod runs, its final status is handed on
	// and its volumes and cgroup are released; its containers stay for
	// their logs until the pod is deleted.
	EndedKept = "kept"
	// EndedCleaned: nothing of the pod is left on the node.
	EndedCleaned = "cleaned"
	// EndedAbandoned: the pod's worker stopped (the agent is stopping)
	// before the termination was done.
	EndedAbandoned = "abandoned"
)

// TracerConfig configures a Tracer.
type TracerConfig struct {
	// Provider makes the spans (the kubelet's `tracing` configuration
	// turned into an OTLP exporter and a sampler); nil traces nothing,
	// at the cost of a nil check per step.
	Provider trace.TracerProvider
}

// Tracer turns the steps of pods' lives into OpenTelemetry spans, the
// same steps the Store keeps: one span per pod start (SpanPodStart),
// opened at the pod's admission and ended at its first ready status,
// with a child span per step taken meanwhile. A step's span is named
// for the step's kind (createContainer, not createContainer:app, so that
// a backend can group them) and carries the pod's identity and the
// container's name; the context a step runs under carries its span to
// the calls it makes, so the CRI calls (traced on the runtime's gRPC
// connection) are its children and hand the trace on to the runtime.
//
// A pod's termination is a trace of its own, likewise: one span
// (SpanPodTermination), opened by the first pass that acts to end the pod
// and ended by the first that finds nothing left to do for it, with the
// steps of every pass between below it (preStop, stopContainer,
// stopSandbox, finalStatus, removeContainer, removeSandbox,
// removePodCgroup, unmountVolumes, confirmDeletion). A pod kept after it
// ended (its containers stay for their logs) has a second one when it is
// deleted, for its cleanup. Any other step (a volume refresh, a step of a
// pod the agent found started, as after its own restart) is a trace of
// its own, sampled as any new trace is.
//
// Sampling is the provider's: a start or termination that is not
// sampled still holds its steps, so that they are not sampled on their
// own either, and costs no more than a non-recording span. Its methods
// are safe for concurrent use.
type Tracer struct {
	tracer trace.Tracer // nil: tracing is off

	mu gosync.Mutex
	// starts are the spans of the pods still starting, ends those of the
	// pods being terminated.
	starts, ends map[types.UID]trace.Span
}

// NewTracer returns a Tracer making spans with cfg.Provider. Nothing in
// cfg can be wrong, so it returns no error.
func NewTracer(cfg TracerConfig) *Tracer {
	t := &Tracer{starts: map[types.UID]trace.Span{}, ends: map[types.UID]trace.Span{}}
	if cfg.Provider != nil {
		t.tracer = cfg.Provider.Tracer(TracerScope)
	}
	return t
}

// StepSpan is the span of one step in progress; the zero StepSpan (no
// tracing) ends as a no-op.
type StepSpan struct {
	span trace.Span
}

// End ends the step at at: failed with err, unless nil.
func (s StepSpan) End(at time.Time, err error) {
	if s.span == nil {
		return
	}
	if err != nil && s.span.IsRecording() {
		s.span.RecordError(err, trace.WithTimestamp(at))
		s.span.SetStatus(codes.Error, err.Error())
	}
	s.span.End(trace.WithTimestamp(at))
}

// Admitted opens the pod's start at the start of its admission, with
// the admission (st) as its first step: a trace of its own, whatever
// span ctx carries. A refused admission (st.Error) ends the start at
// once.
func (t *Tracer) Admitted(ctx context.Context, pod Pod, st Step) {
	if t.tracer == nil {
		return
	}
	ctx, span := t.tracer.Start(ctx, SpanPodStart,
		trace.WithNewRoot(), trace.WithTimestamp(st.Start), trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(podAttributes(pod)...)
	}
	t.Record(ctx, pod, st)
	if st.Error != "" {
		endRoot(span, AttrStartOutcome.String(StartRefused), st.Error, st.End)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.starts[pod.UID]; old != nil {
		old.End(trace.WithTimestamp(st.Start))
	}
	t.starts[pod.UID] = span
}

// Pass is what one pass of a pod's worker does, as the pod's spans see
// it. The zero Pass runs (or waits on) the pod: a step of its start while
// it starts.
type Pass struct {
	// Ending: the pass acts to end the pod (stops it, hands on its final
	// status, tears it down). It ends the pod's start, if still open, and
	// runs under the pod's termination, which it begins if none is open.
	Ending bool
	// Reason (AttrEndReason) and GracePeriod (AttrGracePeriod, in
	// seconds; 0 when the pass stops nothing) go on the termination the
	// pass begins.
	Reason      string
	GracePeriod int64
	// Outcome, when set, ends the pod's termination (and a start still
	// open) with it: the pod has ended and there is nothing left to do
	// for it until it is deleted, or its worker is done.
	Outcome string
}

// Pass returns the context of one pass of the pod's worker (p says what
// it does): ctx with the pod's start span while the pod is starting, with
// its termination span while it is being terminated, else ctx as it is.
// A pass that ends the pod ends a start still open, as stopped, and
// begins the pod's termination (a trace of its own, linked to the start)
// unless it has begun; a pass with an Outcome ends the termination at at.
func (t *Tracer) Pass(ctx context.Context, pod Pod, p Pass, at time.Time) context.Context {
	if t.tracer == nil {
		return ctx
	}
	closing := p.Ending || p.Outcome != ""
	t.mu.Lock()
	start, end := t.starts[pod.UID], t.ends[pod.UID]
	if closing {
		delete(t.starts, pod.UID)
	}
	if p.Outcome != "" {
		delete(t.ends, pod.UID)
	}
	t.mu.Unlock()
	if start != nil && closing {
		endRoot(start, AttrStartOutcome.String(StartStopped), "the pod began to end before it was ready", at)
	}
	switch {
	case p.Outcome != "":
		if end != nil {
			endRoot(end, AttrEndOutcome.String(p.Outcome), "", at)
		}
		return ctx
	case !p.Ending && start != nil:
		return trace.ContextWithSpan(ctx, start)
	case !p.Ending:
		return ctx
	case end != nil:
		return trace.ContextWithSpan(ctx, end)
	}
	end = t.beginTermination(ctx, pod, p, start, at)
	t.mu.Lock()
	t.ends[pod.UID] = end
	t.mu.Unlock()
	return trace.ContextWithSpan(ctx, end)
}

// beginTermination opens the span of the pod's termination at at, a new
// root linked to the start it cuts short, if any.
func (t *Tracer) beginTermination(ctx context.Context, pod Pod, p Pass, start trace.Span, at time.Time) trace.Span {
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithTimestamp(at), trace.WithSpanKind(trace.SpanKindInternal)}
	if start != nil && start.SpanContext().IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: start.SpanContext()}))
	}
	_, span := t.tracer.Start(ctx, SpanPodTermination, opts...)
	if span.IsRecording() {
		span.SetAttributes(podAttributes(pod)...)
		span.SetAttributes(AttrEndReason.String(p.Reason))
		if p.GracePeriod > 0 {
			span.SetAttributes(AttrGracePeriod.Int64(p.GracePeriod))
		}
	}
	return span
}

// Forget ends what is still open of the pod's spans, at at, as
// abandoned: its worker stopped before the pod was ready, or before its
// termination was done (the agent is stopping).
func (t *Tracer) Forget(uid types.UID, at time.Time) {
	if t.tracer == nil {
		return
	}
	t.mu.Lock()
	start, end := t.starts[uid], t.ends[uid]
	delete(t.starts, uid)
	delete(t.ends, uid)
	t.mu.Unlock()
	if start != nil {
		endRoot(start, AttrStartOutcome.String(StartAbandoned), "the agent stopped before the pod was ready", at)
	}
	if end != nil {
		endRoot(end, AttrEndOutcome.String(EndedAbandoned), "the agent stopped before the pod's termination was done", at)
	}
}

// Step opens the span of a step of the pod begun at at, a child of the
// span ctx carries (the pod's start or termination, during them). The context returned
// carries the step's span to the calls the step makes.
func (t *Tracer) Step(ctx context.Context, pod Pod, name string, at time.Time) (context.Context, StepSpan) {
	if t.tracer == nil {
		return ctx, StepSpan{}
	}
	kind, container, _ := strings.Cut(name, ":")
	ctx, span := t.tracer.Start(ctx, kind, trace.WithTimestamp(at), trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(podAttributes(pod)...)
		span.SetAttributes(AttrStep.String(name))
		if container != "" {
			span.SetAttributes(semconv.K8SContainerName(container))
		}
	}
	return ctx, StepSpan{span: span}
}

// Record makes the span of a finished step, one that was not timed as
// it ran (admission, an image found present), a child of the span ctx
// carries.
func (t *Tracer) Record(ctx context.Context, pod Pod, st Step) {
	if t.tracer == nil {
		return
	}
	_, span := t.Step(ctx, pod, st.Name, st.Start)
	if st.Cached && span.span.IsRecording() {
		span.span.SetAttributes(AttrImageCached.Bool(true))
	}
	end := st.End
	if end.IsZero() {
		end = st.Start
	}
	var err error
	if st.Error != "" {
		err = stepError(st.Error)
	}
	span.End(end, err)
}

// ObserveStatus takes the status just computed for the pod: the first
// one that shows it ready, or ended (a pod that runs to completion
// without ever being ready), ends its start.
func (t *Tracer) ObserveStatus(pod Pod, st *v1.PodStatus, at time.Time) {
	if t.tracer == nil {
		return
	}
	outcome := ""
	switch {
	case st.Phase == v1.PodSucceeded:
		outcome = StartSucceeded
	case st.Phase == v1.PodFailed:
		outcome = StartFailed
	case isReady(st):
		outcome = StartReady
	default:
		return
	}
	t.mu.Lock()
	span := t.starts[pod.UID]
	delete(t.starts, pod.UID)
	t.mu.Unlock()
	if span == nil {
		return
	}
	msg := ""
	if outcome == StartFailed {
		msg = "the pod failed before it was ready"
		if st.Message != "" {
			msg += ": " + st.Message
		}
	}
	endRoot(span, AttrStartOutcome.String(outcome), msg, at)
}

// starting counts the pods whose start is open (tests).
func (t *Tracer) starting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.starts)
}

// terminating counts the pods whose termination is open (tests).
func (t *Tracer) terminating() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ends)
}

// endRoot ends the span of a pod's start or termination at at with its
// outcome; msg, when set, is why it is an error.
func endRoot(span trace.Span, outcome attribute.KeyValue, msg string, at time.Time) {
	if span.IsRecording() {
		span.SetAttributes(outcome)
		if msg != "" {
			span.SetStatus(codes.Error, msg)
		}
	}
	span.End(trace.WithTimestamp(at))
}

// podAttributes name the pod on its spans with the kubelet's keys.
func podAttributes(pod Pod) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.K8SPodUID(string(pod.UID)),
		attribute.String("k8s.pod", pod.Namespace+"/"+pod.Name),
		semconv.K8SPodName(pod.Name),
		semconv.K8SNamespaceName(pod.Namespace),
	}
}

func isReady(st *v1.PodStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// stepError is a recorded step's error, as the component gave it.
type stepError string

func (e stepError) Error() string { return string(e) }
