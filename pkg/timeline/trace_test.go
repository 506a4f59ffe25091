package timeline

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
)

// newTestTracer is a Tracer whose spans end up in the returned exporter
// as they end, sampled by sampler (every one when nil).
func newTestTracer(t *testing.T, sampler sdktrace.Sampler) (*Tracer, *tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	if sampler == nil {
		sampler = sdktrace.AlwaysSample()
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sampler)))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return NewTracer(TracerConfig{Provider: tp}), exp, tp.Tracer("cri")
}

// spanTrees draws the exported spans as indented trees, one per trace,
// children in the order they started: "name:container" and, where set,
// the termination's reason, the start's or termination's outcome, a
// cached image and an error status.
func spanTrees(spans tracetest.SpanStubs) string {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	var roots []tracetest.SpanStub
	known := map[trace.SpanID]bool{}
	for _, s := range spans {
		known[s.SpanContext.SpanID()] = true
	}
	for _, s := range spans {
		if p := s.Parent.SpanID(); s.Parent.IsValid() && known[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(list []tracetest.SpanStub) {
		sort.SliceStable(list, func(i, j int) bool { return list[i].StartTime.Before(list[j].StartTime) })
	}
	byStart(roots)
	var b strings.Builder
	var draw func(s tracetest.SpanStub, depth int)
	draw = func(s tracetest.SpanStub, depth int) {
		b.WriteString(strings.Repeat("  ", depth) + s.Name)
		attrs := attrMap(s.Attributes)
		if c := attrs["k8s.container.name"]; c != "" {
			b.WriteString(":" + c)
		}
		if r := attrs[string(AttrEndReason)]; r != "" {
			b.WriteString(" reason=" + r)
		}
		if o := attrs[string(AttrStartOutcome)] + attrs[string(AttrEndOutcome)]; o != "" {
			b.WriteString(" outcome=" + o)
		}
		if attrs[string(AttrImageCached)] == "true" {
			b.WriteString(" cached")
		}
		if s.Status.Code == codes.Error {
			b.WriteString(" error=" + s.Status.Description)
		}
		b.WriteString("\n")
		kids := children[s.SpanContext.SpanID()]
		byStart(kids)
		for _, k := range kids {
			draw(k, depth+1)
		}
	}
	for _, r := range roots {
		draw(r, 0)
	}
	return b.String()
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

func spanNamed(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no span %s in\n%s", name, spanTrees(spans))
	return tracetest.SpanStub{}
}

var readyStatus = &v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}

// A pod's start is one trace: the start from its admission to its first
// ready status, each step below it, and a step's calls (the CRI's, as
// otelgrpc makes them from the step's context) below the step. A step
// after the start is a trace of its own.
func TestTracerTracesPodStart(t *testing.T) {
	tr, exp, cri := newTestTracer(t, nil)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	call := func(ctx context.Context, name string) {
		_, s := cri.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
		s.End()
	}

	tr.Admitted(context.Background(), web, Step{Name: "admit", Start: at(0), End: at(1)})
	ctx := tr.Pass(context.Background(), web, Pass{}, at(2))
	_, s := tr.Step(ctx, web, "podCgroup", at(2))
	s.End(at(3), nil)
	sctx, s := tr.Step(ctx, web, "sandbox", at(4))
	call(sctx, "runtime.v1.RuntimeService/RunPodSandbox")
	s.End(at(10), nil)
	tr.Record(ctx, web, Step{Name: "pullImage:app", Start: at(11), Cached: true})
	sctx, s = tr.Step(ctx, web, "createContainer:app", at(12))
	call(sctx, "runtime.v1.RuntimeService/CreateContainer")
	s.End(at(13), errors.New("rpc error: code = Unknown desc = boom"))
	// The next pass: the start goes on.
	ctx = tr.Pass(context.Background(), web, Pass{}, at(20))
	sctx, s = tr.Step(ctx, web, "createContainer:app", at(20))
	call(sctx, "runtime.v1.RuntimeService/CreateContainer")
	s.End(at(21), nil)
	sctx, s = tr.Step(ctx, web, "startContainer:app", at(22))
	call(sctx, "runtime.v1.RuntimeService/StartContainer")
	s.End(at(23), nil)
	tr.ObserveStatus(web, &v1.PodStatus{Phase: v1.PodPending}, at(24))
	tr.ObserveStatus(web, readyStatus, at(30))
	// Past its start, the pod's steps are traces of their own.
	ctx = tr.Pass(context.Background(), web, Pass{}, at(60))
	if trace.SpanFromContext(ctx).SpanContext().IsValid() {
		t.Error("a pass after the start carries a span")
	}
	_, s = tr.Step(ctx, web, "volumes", at(60))
	s.End(at(61), nil)

	spans := exp.GetSpans()
	want := `podStart outcome=ready
  admit
  podCgroup
  sandbox
    runtime.v1.RuntimeService/RunPodSandbox
  pullImage:app cached
  createContainer:app error=rpc error: code = Unknown desc = boom
    runtime.v1.RuntimeService/CreateContainer
  createContainer:app
    runtime.v1.RuntimeService/CreateContainer
  startContainer:app
    runtime.v1.RuntimeService/StartContainer
volumes
`
	if got := spanTrees(spans); got != want {
		t.Errorf("spans\n%s\nwant\n%s", got, want)
	}
	root := spanNamed(t, spans, SpanPodStart)
	if !root.StartTime.Equal(at(0)) || !root.EndTime.Equal(at(30)) {
		t.Errorf("the start runs %v to %v, want from its admission to its readiness", root.StartTime, root.EndTime)
	}
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "runtime.") {
			continue
		}
		a := attrMap(s.Attributes)
		if a["k8s.pod.uid"] != "uid-1" || a["k8s.pod.name"] != "web" || a["k8s.namespace.name"] != "default" || a["k8s.pod"] != "default/web" {
			t.Errorf("span %s names the pod %v", s.Name, a)
		}
	}
	if c := spanNamed(t, spans, "createContainer"); attrMap(c.Attributes)[string(AttrStep)] != "createContainer:app" {
		t.Errorf("createContainer's step attribute: %v", c.Attributes)
	}
	if tr.starting() != 0 {
		t.Errorf("%d starts still open", tr.starting())
	}
}

// How a start ends: at its readiness, its end, a refused admission, or
// when the pod begins to end before it is ready.
func TestTracerEndsStart(t *testing.T) {
	tests := []struct {
		name string
		// refused: admission refuses the pod.
		refused bool
		// then ends the start after admission and one step.
		then        func(t *testing.T, tr *Tracer, at time.Time)
		wantOutcome string
		wantError   string
		// wantOpen: the start is still open.
		wantOpen bool
	}{
		{name: "ready", then: func(t *testing.T, tr *Tracer, at time.Time) { tr.ObserveStatus(web, readyStatus, at) }, wantOutcome: StartReady},
		{name: "not ready yet", then: func(t *testing.T, tr *Tracer, at time.Time) {
			tr.ObserveStatus(web, &v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse}}}, at)
		}, wantOpen: true},
		{name: "ran to completion", then: func(t *testing.T, tr *Tracer, at time.Time) {
			tr.ObserveStatus(web, &v1.PodStatus{Phase: v1.PodSucceeded}, at)
		}, wantOutcome: StartSucceeded},
		{name: "failed", then: func(t *testing.T, tr *Tracer, at time.Time) {
			tr.ObserveStatus(web, &v1.PodStatus{Phase: v1.PodFailed, Message: "OOMKilled"}, at)
		}, wantOutcome: StartFailed, wantError: "the pod failed before it was ready: OOMKilled"},
		{name: "stopped", then: func(t *testing.T, tr *Tracer, at time.Time) {
			ctx := tr.Pass(context.Background(), web, Pass{Ending: true, Reason: EndDeleted}, at)
			if s, ok := trace.SpanFromContext(ctx).(sdktrace.ReadOnlySpan); !ok || s.Name() != SpanPodTermination {
				t.Error("an ending pass does not carry the pod's termination")
			}
			tr.Forget(web.UID, at)
		}, wantOutcome: StartStopped, wantError: "the pod began to end before it was ready"},
		{name: "abandoned", then: func(t *testing.T, tr *Tracer, at time.Time) { tr.Forget(web.UID, at) },
			wantOutcome: StartAbandoned, wantError: "the agent stopped before the pod was ready"},
		{name: "refused", refused: true, wantOutcome: StartRefused, wantError: "OutOfcpu: no room"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, exp, _ := newTestTracer(t, nil)
			admit := Step{Name: "admit", Start: t0, End: t0.Add(time.Millisecond)}
			if tt.refused {
				admit.Error = "OutOfcpu: no room"
			}
			tr.Admitted(context.Background(), web, admit)
			if tt.then != nil {
				ctx := tr.Pass(context.Background(), web, Pass{}, t0.Add(2*time.Millisecond))
				_, s := tr.Step(ctx, web, "volumes", t0.Add(2*time.Millisecond))
				s.End(t0.Add(3*time.Millisecond), nil)
				tt.then(t, tr, t0.Add(time.Second))
			}
			var root *tracetest.SpanStub
			for _, s := range exp.GetSpans() {
				if s.Name == SpanPodStart {
					root = &s
				}
			}
			if tt.wantOpen {
				if root != nil || tr.starting() != 1 {
					t.Errorf("the start ended (%d open)", tr.starting())
				}
				return
			}
			if root == nil || tr.starting() != 0 {
				t.Fatalf("the start did not end (%d open):\n%s", tr.starting(), spanTrees(exp.GetSpans()))
			}
			if got := attrMap(root.Attributes)[string(AttrStartOutcome)]; got != tt.wantOutcome {
				t.Errorf("outcome %q, want %q", got, tt.wantOutcome)
			}
			if tt.wantError == "" && root.Status.Code == codes.Error || tt.wantError != "" && root.Status.Description != tt.wantError {
				t.Errorf("status %+v, want error %q", root.Status, tt.wantError)
			}
			if tt.refused {
				admit := spanNamed(t, exp.GetSpans(), "admit")
				if admit.Status.Code != codes.Error || len(admit.Events) == 0 {
					t.Errorf("the refused admission: status %+v, events %v", admit.Status, admit.Events)
				}
			}
		})
	}
}

// A start that is not sampled holds its steps all the same: they are
// not sampled on their own, as new traces would be.
func TestTracerUnsampledStartHoldsItsSteps(t *testing.T) {
	tr, exp, _ := newTestTracer(t, notNamed(SpanPodStart))
	tr.Admitted(context.Background(), web, Step{Name: "admit", Start: t0, End: t0})
	ctx := tr.Pass(context.Background(), web, Pass{}, t0)
	_, s := tr.Step(ctx, web, "sandbox", t0)
	s.End(t0, nil)
	if tr.starting() != 1 {
		t.Errorf("the unsampled start is not kept (%d open)", tr.starting())
	}
	tr.ObserveStatus(web, readyStatus, t0)
	if spans := exp.GetSpans(); len(spans) != 0 || tr.starting() != 0 {
		t.Errorf("spans of an unsampled start exported:\n%s(%d open)", spanTrees(spans), tr.starting())
	}
}

// Without a provider, tracing costs nothing: contexts go through as
// they are and no start is kept.
func TestTracerOff(t *testing.T) {
	tr := NewTracer(TracerConfig{})
	tr.Admitted(context.Background(), web, Step{Name: "admit", Start: t0, End: t0})
	ctx := context.Background()
	if got := tr.Pass(ctx, web, Pass{}, t0); got != ctx {
		t.Error("Pass made a new context")
	}
	got, s := tr.Step(ctx, web, "sandbox", t0)
	if got != ctx || s != (StepSpan{}) {
		t.Error("Step made a span")
	}
	s.End(t0, errors.New("boom"))
	tr.Record(ctx, web, Step{Name: "pullImage:app", Start: t0, Cached: true})
	tr.ObserveStatus(web, readyStatus, t0)
	if got := tr.Pass(ctx, web, Pass{Ending: true, Reason: EndDeleted, GracePeriod: 30}, t0); got != ctx {
		t.Error("an ending Pass made a new context")
	}
	tr.Pass(ctx, web, Pass{Outcome: EndedCleaned}, t0)
	tr.Forget(web.UID, t0)
	if tr.starting() != 0 || tr.terminating() != 0 {
		t.Errorf("%d starts and %d terminations kept", tr.starting(), tr.terminating())
	}
	// The passes of a termination cost nothing.
	allocs := testing.AllocsPerRun(100, func() {
		ctx := tr.Pass(ctx, web, Pass{Ending: true, Reason: EndDeleted, GracePeriod: 30}, t0)
		_, s := tr.Step(ctx, web, "stopContainer:app", t0)
		s.End(t0, nil)
		tr.Pass(ctx, web, Pass{Outcome: EndedCleaned}, t0)
		tr.Forget(web.UID, t0)
	})
	if allocs != 0 {
		t.Errorf("a termination's passes allocate %v times with tracing off", allocs)
	}
}

// notNamed samples every new trace but those whose root is named name.
type notNamed string

func (n notNamed) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == string(n) {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}

func (n notNamed) Description() string { return fmt.Sprintf("NotNamed{%s}", string(n)) }

// A pod's termination is one trace, across the passes it takes: from
// the first that acts to end the pod to the first with nothing left to
// do, each step below it (a failed one with its error) and the CRI calls
// below their step. It is linked to the start it cut short.
func TestTracerTracesPodTermination(t *testing.T) {
	tr, exp, cri := newTestTracer(t, nil)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	call := func(ctx context.Context, name string) {
		_, s := cri.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
		s.End()
	}
	// step takes a step with its calls; one named with a "!" fails.
	step := func(ctx context.Context, name string, from, to int, calls ...string) {
		var err error
		if n, failed := strings.CutSuffix(name, "!"); failed {
			name, err = n, errors.New("rpc error: code = Unknown desc = boom")
		}
		sctx, s := tr.Step(ctx, web, name, at(from))
		for _, c := range calls {
			call(sctx, "runtime.v1.RuntimeService/"+c)
		}
		s.End(at(to), err)
	}
	deleted := Pass{Ending: true, Reason: EndDeleted, GracePeriod: 30}

	tr.Admitted(context.Background(), web, Step{Name: "admit", Start: at(0), End: at(1)})
	step(tr.Pass(context.Background(), web, Pass{}, at(2)), "sandbox", 2, 5, "RunPodSandbox")
	// Deleted before it was ready: the stop fails, and the next pass
	// tries again under the same termination.
	ctx := tr.Pass(context.Background(), web, deleted, at(10))
	step(ctx, "preStop:app", 10, 12)
	step(ctx, "stopContainer:app!", 12, 14, "StopContainer")
	ctx = tr.Pass(context.Background(), web, deleted, at(20))
	step(ctx, "stopContainer:app", 20, 22, "StopContainer")
	step(ctx, "stopSandbox", 22, 25, "StopPodSandbox")
	ctx = tr.Pass(context.Background(), web, deleted, at(30))
	step(ctx, "finalStatus", 30, 30)
	ctx = tr.Pass(context.Background(), web, deleted, at(31))
	step(ctx, "removeContainer:app", 31, 32, "RemoveContainer")
	step(ctx, "removeSandbox", 32, 33, "RemovePodSandbox")
	step(ctx, "unmountVolumes", 33, 35)
	ctx = tr.Pass(context.Background(), web, deleted, at(36))
	step(ctx, "confirmDeletion", 36, 36)
	// Nothing left to do: the termination ends, once.
	tr.Pass(context.Background(), web, Pass{Outcome: EndedCleaned}, at(40))
	tr.Pass(context.Background(), web, Pass{Outcome: EndedCleaned}, at(50))
	tr.Forget(web.UID, at(60))

	spans := exp.GetSpans()
	want := `podStart outcome=stopped error=the pod began to end before it was ready
  admit
  sandbox
    runtime.v1.RuntimeService/RunPodSandbox
podTermination reason=deleted outcome=cleaned
  preStop:app
  stopContainer:app error=rpc error: code = Unknown desc = boom
    runtime.v1.RuntimeService/StopContainer
  stopContainer:app
    runtime.v1.RuntimeService/StopContainer
  stopSandbox
    runtime.v1.RuntimeService/StopPodSandbox
  finalStatus
  removeContainer:app
    runtime.v1.RuntimeService/RemoveContainer
  removeSandbox
    runtime.v1.RuntimeService/RemovePodSandbox
  unmountVolumes
  confirmDeletion
`
	if got := spanTrees(spans); got != want {
		t.Errorf("spans\n%s\nwant\n%s", got, want)
	}
	root, start := spanNamed(t, spans, SpanPodTermination), spanNamed(t, spans, SpanPodStart)
	if !root.StartTime.Equal(at(10)) || !root.EndTime.Equal(at(40)) {
		t.Errorf("the termination runs %v to %v, want from its first pass to the one with nothing left to do", root.StartTime, root.EndTime)
	}
	if root.Status.Code == codes.Error {
		t.Errorf("a termination done is an error: %+v", root.Status)
	}
	if len(root.Links) != 1 || root.Links[0].SpanContext.SpanID() != start.SpanContext.SpanID() {
		t.Errorf("the termination's links %v, want the start it cut short", root.Links)
	}
	a := attrMap(root.Attributes)
	if a["k8s.pod.uid"] != "uid-1" || a["k8s.pod.name"] != "web" || a["k8s.namespace.name"] != "default" || a["k8s.pod"] != "default/web" ||
		a[string(AttrGracePeriod)] != "30" {
		t.Errorf("the termination's attributes %v", a)
	}
	for _, s := range spans {
		if s.Parent.SpanID() == root.SpanContext.SpanID() && attrMap(s.Attributes)["k8s.pod.uid"] != "uid-1" {
			t.Errorf("step %s does not name the pod: %v", s.Name, s.Attributes)
		}
	}
	if tr.starting() != 0 || tr.terminating() != 0 {
		t.Errorf("%d starts and %d terminations still open", tr.starting(), tr.terminating())
	}
}

// How a termination ends: with nothing left to do for the pod, kept for
// its logs or cleaned up (a kept pod's deletion is a termination of its
// own), or abandoned when its worker stops.
func TestTracerEndsTermination(t *testing.T) {
	tests := []struct {
		name string
		// passes are the passes after the termination began, as the pod
		// completed: "step" takes one, an Outcome ends.
		passes []Pass
		forget bool
		// want is the terminations' roots as spanTrees draws them.
		want []string
	}{
		{name: "kept", passes: []Pass{{Outcome: EndedKept}},
			want: []string{"podTermination reason=completed outcome=kept"}},
		{name: "kept, then deleted", passes: []Pass{{Outcome: EndedKept}, {Outcome: EndedKept}, {Ending: true, Reason: EndDeleted}, {Outcome: EndedCleaned}},
			want: []string{"podTermination reason=completed outcome=kept", "podTermination reason=deleted outcome=cleaned"}},
		{name: "abandoned", passes: []Pass{{Ending: true, Reason: EndCompleted}}, forget: true,
			want: []string{"podTermination reason=completed outcome=abandoned error=the agent stopped before the pod's termination was done"}},
		{name: "still open", passes: []Pass{{Ending: true, Reason: EndCompleted}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, exp, _ := newTestTracer(t, nil)
			at := t0
			_, s := tr.Step(tr.Pass(context.Background(), web, Pass{Ending: true, Reason: EndCompleted}, at), web, "stopSandbox", at)
			s.End(at, nil)
			for _, p := range tt.passes {
				at = at.Add(time.Second)
				ctx := tr.Pass(context.Background(), web, p, at)
				if p.Ending {
					_, s := tr.Step(ctx, web, "removeSandbox", at)
					s.End(at, nil)
				}
			}
			if tt.forget {
				tr.Forget(web.UID, at)
			}
			var got []string
			for _, line := range strings.Split(spanTrees(exp.GetSpans()), "\n") {
				if strings.HasPrefix(line, SpanPodTermination) {
					got = append(got, line)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("terminations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if open := tr.terminating(); open != 1 && tt.want == nil || open != 0 && tt.want != nil {
				t.Errorf("%d terminations open", open)
			}
		})
	}
}

// A termination that is not sampled holds its steps all the same.
func TestTracerUnsampledTerminationHoldsItsSteps(t *testing.T) {
	tr, exp, _ := newTestTracer(t, notNamed(SpanPodTermination))
	ctx := tr.Pass(context.Background(), web, Pass{Ending: true, Reason: EndEvicted}, t0)
	_, s := tr.Step(ctx, web, "stopSandbox", t0)
	s.End(t0, nil)
	if tr.terminating() != 1 {
		t.Errorf("the unsampled termination is not kept (%d open)", tr.terminating())
	}
	tr.Pass(context.Background(), web, Pass{Outcome: EndedKept}, t0)
	if spans := exp.GetSpans(); len(spans) != 0 || tr.terminating() != 0 {
		t.Errorf("spans of an unsampled termination exported:\n%s(%d open)", spanTrees(spans), tr.terminating())
	}
}
