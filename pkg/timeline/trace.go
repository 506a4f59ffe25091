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
)

// Outcomes of a pod's start (AttrStartOutcome).
const (
	StartReady     = "ready"
	StartSucceeded = "succeeded"
	StartFailed    = "failed"
	StartRefused   = "refused"
	StartStopped   = "stopped"
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
// A step outside a pod's start (a volume refresh, a termination, any
// step of a pod the agent found started, as after its own restart) is a
// trace of its own, sampled as any new trace is.
//
// Sampling is the provider's: a start that is not sampled still holds
// its steps, so that they are not sampled on their own either, and costs
// no more than a non-recording span. Its methods are safe for concurrent
// use.
type Tracer struct {
	tracer trace.Tracer // nil: tracing is off

	mu gosync.Mutex
	// starts are the spans of the pods still starting.
	starts map[types.UID]trace.Span
}

// NewTracer returns a Tracer making spans with cfg.Provider. Nothing in
// cfg can be wrong, so it returns no error.
func NewTracer(cfg TracerConfig) *Tracer {
	t := &Tracer{starts: map[types.UID]trace.Span{}}
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
		endStart(span, StartRefused, st.Error, st.End)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.starts[pod.UID]; old != nil {
		old.End(trace.WithTimestamp(st.Start))
	}
	t.starts[pod.UID] = span
}

// Pass returns the context of one pass of the pod's worker: ctx with
// the pod's start span while the pod is starting. A pass that ends the
// pod (ending) ends a start still open, as stopped, and returns ctx as
// it is: the steps of the pod's termination are traces of their own.
func (t *Tracer) Pass(ctx context.Context, uid types.UID, ending bool, at time.Time) context.Context {
	if t.tracer == nil {
		return ctx
	}
	t.mu.Lock()
	span := t.starts[uid]
	if ending {
		delete(t.starts, uid)
	}
	t.mu.Unlock()
	switch {
	case span == nil:
		return ctx
	case ending:
		endStart(span, StartStopped, "the pod began to end before it was ready", at)
		return ctx
	}
	return trace.ContextWithSpan(ctx, span)
}

// Step opens the span of a step of the pod begun at at, a child of the
// span ctx carries (the pod's start, during it). The context returned
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
	endStart(span, outcome, msg, at)
}

// starting counts the pods whose start is open (tests).
func (t *Tracer) starting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.starts)
}

// endStart ends a pod's start with its outcome; msg, when set, is why it
// is an error.
func endStart(span trace.Span, outcome, msg string, at time.Time) {
	if span.IsRecording() {
		span.SetAttributes(AttrStartOutcome.String(outcome))
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
