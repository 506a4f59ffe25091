package sync

import (
	"context"
	"sort"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

// tracedRuntime makes a client span of each call that creates or starts
// something, from the context the worker hands it, as the CRI client's
// otelgrpc handler does on the real connection.
type tracedRuntime struct {
	Runtime
	tracer trace.Tracer
}

func (r tracedRuntime) call(ctx context.Context, name string) func() {
	_, span := r.tracer.Start(ctx, "runtime.v1.RuntimeService/"+name, trace.WithSpanKind(trace.SpanKindClient))
	return func() { span.End() }
}

func (r tracedRuntime) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	defer r.call(ctx, "RunPodSandbox")()
	return r.Runtime.RunPodSandbox(ctx, cfg, handler)
}

func (r tracedRuntime) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	defer r.call(ctx, "CreateContainer")()
	return r.Runtime.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
}

func (r tracedRuntime) StartContainer(ctx context.Context, id string) error {
	defer r.call(ctx, "StartContainer")()
	return r.Runtime.StartContainer(ctx, id)
}

func (r tracedRuntime) StopContainer(ctx context.Context, id string, timeout int64) error {
	defer r.call(ctx, "StopContainer")()
	return r.Runtime.StopContainer(ctx, id, timeout)
}

func (r tracedRuntime) StopPodSandbox(ctx context.Context, id string) error {
	defer r.call(ctx, "StopPodSandbox")()
	return r.Runtime.StopPodSandbox(ctx, id)
}

func (r tracedRuntime) RemoveContainer(ctx context.Context, id string) error {
	defer r.call(ctx, "RemoveContainer")()
	return r.Runtime.RemoveContainer(ctx, id)
}

func (r tracedRuntime) RemovePodSandbox(ctx context.Context, id string) error {
	defer r.call(ctx, "RemovePodSandbox")()
	return r.Runtime.RemovePodSandbox(ctx, id)
}

// A pod's start, admitted and run by its worker pass by pass, is one
// trace: the start, the steps of every pass below it until the pod is
// ready, and the runtime's calls below the steps that make them.
func TestWorkerTracesPodStart(t *testing.T) {
	pod := basePod(withInit("init"), func(p *v1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		p.Spec.InitContainers[0].ImagePullPolicy = v1.PullIfNotPresent
		p.Spec.Containers[0].ImagePullPolicy = v1.PullIfNotPresent
	})
	h := newHarness(t, pod)
	withAdmission(t, h, "4")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h.d.deps.tracer = timeline.NewTracer(timeline.TracerConfig{Provider: tp})
	h.d.deps.runtime = tracedRuntime{Runtime: h.rt, tracer: tp.Tracer("cri")}
	h.d.deps.cgroups = &fakeCgroups{}

	if h.w = h.admitted(pod); h.w == nil {
		t.Fatal("the pod was not admitted")
	}
	h.sync(pod, false)
	h.exit("init", 0)
	h.sync(pod, false)
	h.sync(pod, false) // sees the app container running: ready

	spans := exp.GetSpans()
	var root *tracetest.SpanStub
	for i, s := range spans {
		if s.Name == timeline.SpanPodStart {
			root = &spans[i]
		}
	}
	if root == nil {
		t.Fatalf("no %s span among %d", timeline.SpanPodStart, len(spans))
	}
	// The spans of the start's trace, each named with its container and
	// indented below its parent, in the order they started.
	got := drawTrace(spans, root.SpanContext)
	want := strings.Join([]string{
		"podStart",
		"  admit",
		"  podCgroup",
		"  volumes",
		"  sandbox",
		"    runtime.v1.RuntimeService/RunPodSandbox",
		"  pullImage:init",
		"  createContainer:init",
		"    runtime.v1.RuntimeService/CreateContainer",
		"  startContainer:init",
		"    runtime.v1.RuntimeService/StartContainer",
		"  pullImage:a",
		"  createContainer:a",
		"    runtime.v1.RuntimeService/CreateContainer",
		"  startContainer:a",
		"    runtime.v1.RuntimeService/StartContainer",
	}, "\n")
	if got != want {
		t.Errorf("the start's trace\n%s\nwant\n%s", got, want)
	}
	for _, s := range spans {
		if s.SpanContext.TraceID() == root.SpanContext.TraceID() && !strings.HasPrefix(s.Name, "runtime.") &&
			!hasAttr(s, "k8s.pod.uid", string(pod.UID)) {
			t.Errorf("span %s does not name the pod: %v", s.Name, s.Attributes)
		}
	}
	if !hasAttr(*root, string(timeline.AttrStartOutcome), timeline.StartReady) {
		t.Errorf("the start's attributes: %v", root.Attributes)
	}
}

// drawTrace draws the spans of root's trace as a tree below it.
func drawTrace(spans tracetest.SpanStubs, root trace.SpanContext) string {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	var top tracetest.SpanStub
	for _, s := range spans {
		switch {
		case s.SpanContext.TraceID() != root.TraceID():
		case s.SpanContext.SpanID() == root.SpanID():
			top = s
		default:
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		}
	}
	var lines []string
	var draw func(s tracetest.SpanStub, depth int)
	draw = func(s tracetest.SpanStub, depth int) {
		name := s.Name
		for _, kv := range s.Attributes {
			if kv.Key == "k8s.container.name" {
				name += ":" + kv.Value.AsString()
			}
		}
		lines = append(lines, strings.Repeat("  ", depth)+name)
		kids := children[s.SpanContext.SpanID()]
		sort.SliceStable(kids, func(i, j int) bool { return kids[i].StartTime.Before(kids[j].StartTime) })
		for _, k := range kids {
			draw(k, depth+1)
		}
	}
	draw(top, 0)
	return strings.Join(lines, "\n")
}

func hasAttr(s tracetest.SpanStub, key, value string) bool {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit() == value
		}
	}
	return false
}

// spanLedger is a span processor that keeps the spans started and not
// yet ended.
type spanLedger struct {
	mu   gosync.Mutex
	open map[trace.SpanID]string
}

func (l *spanLedger) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open[s.SpanContext().SpanID()] = s.Name()
}

func (l *spanLedger) OnEnd(s sdktrace.ReadOnlySpan) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.open, s.SpanContext().SpanID())
}

func (l *spanLedger) Shutdown(context.Context) error   { return nil }
func (l *spanLedger) ForceFlush(context.Context) error { return nil }

// unended names the spans started and not ended.
func (l *spanLedger) unended() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, name := range l.open {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// withTracing traces h's worker into the returned exporter, the runtime's
// calls too (as the CRI client's otelgrpc handler does), with sampler
// (every trace when nil).
func withTracing(t *testing.T, h *harness, sampler sdktrace.Sampler) (*tracetest.InMemoryExporter, *spanLedger) {
	t.Helper()
	if sampler == nil {
		sampler = sdktrace.AlwaysSample()
	}
	exp := tracetest.NewInMemoryExporter()
	ledger := &spanLedger{open: map[trace.SpanID]string{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(ledger),
		sdktrace.WithSampler(sdktrace.ParentBased(sampler)))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h.d.deps.tracer = timeline.NewTracer(timeline.TracerConfig{Provider: tp})
	h.d.deps.runtime = tracedRuntime{Runtime: h.d.deps.runtime, tracer: tp.Tracer("cri")}
	h.d.deps.cgroups = &fakeCgroups{}
	return exp, ledger
}

// terminationTraces are the roots of the pod terminations exported.
func terminationTraces(spans tracetest.SpanStubs) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == timeline.SpanPodTermination {
			out = append(out, s)
		}
	}
	return out
}

// withPreStop gives the pod's one container, a, a preStop hook.
func withPreStop(p *v1.Pod) {
	p.Spec.Containers = p.Spec.Containers[:1]
	p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 1}}}
}

// deletedPod is pod as its graceful deletion leaves it.
func deletedPod(pod *v1.Pod, grace int64) *v1.Pod {
	deleted := pod.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp, deleted.DeletionGracePeriodSeconds = &now, &grace
	return deleted
}

// A pod's termination, from its deletion to its cleanup over several
// passes, is one trace: the termination, each step below it in order,
// and the runtime's calls below the steps that make them.
func TestWorkerTracesPodTermination(t *testing.T) {
	pod := basePod(withPreStop)
	h := newHarness(t, pod)
	withFakeProbes(h)
	exp, ledger := withTracing(t, h, nil)

	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 1 {
		t.Fatalf("running %v, want a", got)
	}
	deleted := deletedPod(pod, 30)
	h.sync(deleted, false) // stop, final status, cleanup, confirmation
	if len(terminationTraces(exp.GetSpans())) != 0 {
		t.Fatal("the termination ended before a pass found nothing left to do")
	}
	h.sync(deleted, false) // nothing left to do: the termination ends
	if !h.sync(deleted, true) {
		t.Fatal("worker not done after removal")
	}

	spans := exp.GetSpans()
	roots := terminationTraces(spans)
	if len(roots) != 1 {
		t.Fatalf("%d terminations traced, want 1", len(roots))
	}
	root := roots[0]
	got := drawTrace(spans, root.SpanContext)
	want := strings.Join([]string{
		"podTermination",
		"  preStop:a",
		"  stopContainer:a",
		"    runtime.v1.RuntimeService/StopContainer",
		"  stopSandbox",
		"    runtime.v1.RuntimeService/StopPodSandbox",
		"  finalStatus",
		"  removeContainer:a",
		"    runtime.v1.RuntimeService/RemoveContainer",
		"  removeSandbox",
		"    runtime.v1.RuntimeService/RemovePodSandbox",
		"  removePodCgroup",
		"  unmountVolumes",
		"  confirmDeletion",
	}, "\n")
	if got != want {
		t.Errorf("the termination's trace\n%s\nwant\n%s", got, want)
	}
	for key, value := range map[string]string{
		"k8s.pod.uid": string(pod.UID), "k8s.pod.name": pod.Name, "k8s.namespace.name": pod.Namespace,
		"k8s.pod": pod.Namespace + "/" + pod.Name, string(timeline.AttrEndReason): timeline.EndDeleted,
		string(timeline.AttrEndOutcome): timeline.EndedCleaned, string(timeline.AttrGracePeriod): "30",
	} {
		if !hasAttr(root, key, value) {
			t.Errorf("the termination lacks %s=%s: %v", key, value, root.Attributes)
		}
	}
	// Its steps, one after the other, within it and naming the pod.
	var steps []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.SpanID() == root.SpanContext.SpanID() {
			steps = append(steps, s)
		}
	}
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].StartTime.Before(steps[j].StartTime) })
	for i, s := range steps {
		if !hasAttr(s, "k8s.pod.uid", string(pod.UID)) || !hasAttr(s, "k8s.pod.name", pod.Name) {
			t.Errorf("step %s does not name the pod: %v", s.Name, s.Attributes)
		}
		if s.StartTime.Before(root.StartTime) || s.EndTime.After(root.EndTime) {
			t.Errorf("step %s (%v to %v) is outside the termination (%v to %v)", s.Name, s.StartTime, s.EndTime, root.StartTime, root.EndTime)
		}
		if i > 0 && s.StartTime.Before(steps[i-1].EndTime) {
			t.Errorf("step %s begins before %s ends", s.Name, steps[i-1].Name)
		}
		if s.Status.Code == codes.Error {
			t.Errorf("step %s failed: %v", s.Name, s.Status)
		}
	}
	if open := ledger.unended(); len(open) != 0 {
		t.Errorf("spans never ended: %v", open)
	}
}

// failingStops is a runtime whose container stops fail, fails times
// (for ever when negative).
type failingStops struct {
	Runtime
	mu    gosync.Mutex
	fails int
}

func (r *failingStops) StopContainer(ctx context.Context, id string, timeout int64) error {
	r.mu.Lock()
	fail := r.fails != 0
	r.fails--
	r.mu.Unlock()
	if fail {
		return grpcstatus.Error(grpccodes.DeadlineExceeded, "stop timed out")
	}
	return r.Runtime.StopContainer(ctx, id, timeout)
}

// A step of the termination that fails shows its error, and the pass
// that tries again is in the same trace; a termination its worker gives
// up on (the agent stops) ends all the same, as abandoned.
func TestWorkerTracesFailedTermination(t *testing.T) {
	tests := []struct {
		name  string
		fails int
		// stop: the worker stops in the middle of the termination.
		stop        bool
		wantOutcome string
		wantError   string
	}{
		{name: "a stop fails once", fails: 1, wantOutcome: timeline.EndedCleaned},
		{name: "the agent stops", fails: -1, stop: true, wantOutcome: timeline.EndedAbandoned,
			wantError: "the agent stopped before the pod's termination was done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := basePod(withPreStop)
			h := newHarness(t, pod)
			withFakeProbes(h)
			h.d.deps.runtime = &failingStops{Runtime: h.d.deps.runtime, fails: tt.fails}
			exp, ledger := withTracing(t, h, nil)
			h.sync(pod, false)
			deleted := deletedPod(pod, 30)
			h.sync(deleted, false) // the stop fails
			if tt.stop {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				h.w.run(ctx)
			} else {
				h.sync(deleted, false) // stopped at last, and cleaned up
				h.sync(deleted, false) // nothing left to do
			}

			spans := exp.GetSpans()
			roots := terminationTraces(spans)
			if len(roots) != 1 {
				t.Fatalf("%d terminations traced, want 1", len(roots))
			}
			root := roots[0]
			var failed, stops int
			for _, s := range spans {
				if s.SpanContext.TraceID() != root.SpanContext.TraceID() || s.Name != "stopContainer" {
					continue
				}
				stops++
				if s.Status.Code == codes.Error {
					failed++
					if s.Status.Description != "rpc error: code = DeadlineExceeded desc = stop timed out" || len(s.Events) == 0 || s.Events[0].Name != "exception" {
						t.Errorf("the failed stop's status %+v, events %v", s.Status, s.Events)
					}
				}
			}
			if failed == 0 || tt.fails > 0 && (failed != tt.fails || stops != failed+1) {
				t.Errorf("%d stops, %d failed, in the termination's trace:\n%s", stops, failed, drawTrace(spans, root.SpanContext))
			}
			if !hasAttr(root, string(timeline.AttrEndOutcome), tt.wantOutcome) {
				t.Errorf("the termination's outcome: %v, want %s", root.Attributes, tt.wantOutcome)
			}
			if tt.wantError == "" && root.Status.Code == codes.Error || tt.wantError != "" && root.Status.Description != tt.wantError {
				t.Errorf("the termination's status %+v, want error %q", root.Status, tt.wantError)
			}
			if open := ledger.unended(); len(open) != 0 {
				t.Errorf("spans never ended: %v", open)
			}
		})
	}
}

// Why a termination begins, as its span says.
func TestEndReason(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name    string
		st      podState
		s       step
		deleted bool
		removed bool
		want    string
	}{
		{name: "deleted", s: step{kind: stepStop, begin: &ending{}}, deleted: true, want: timeline.EndDeleted},
		{name: "removed", s: step{kind: stepStop, begin: &ending{quiet: true}}, removed: true, want: timeline.EndRemoved},
		{name: "restart policy", s: step{kind: stepStop, begin: &ending{}}, want: timeline.EndCompleted},
		{name: "evicted", s: step{kind: stepStop, begin: &ending{reason: "Evicted", message: "memory"}}, want: timeline.EndEvicted},
		{name: "deadline", s: step{kind: stepStop, begin: &ending{reason: reasonDeadlineExceeded}}, want: timeline.EndDeadlineExceeded},
		{name: "found ended", s: step{kind: stepStop, begin: &ending{quiet: true}}, want: timeline.EndFoundEnded},
		{name: "rejected", st: podState{phase: phaseTerminated, end: ending{rejected: true, reason: "OutOfcpu"}}, s: step{kind: stepFinal, write: true},
			want: timeline.EndRejected},
		{name: "ended, then deleted", st: podState{phase: phaseTerminated}, s: step{kind: stepCleanup}, deleted: true, want: timeline.EndDeleted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := basePod()
			if tt.deleted {
				pod.DeletionTimestamp = &now
			}
			p := tracedPass(&tt.st, tt.s, pod, tt.removed)
			if !p.Ending || p.Reason != tt.want {
				t.Errorf("pass %+v, want ending for %s", p, tt.want)
			}
		})
	}
}

// Which passes run under the pod's termination, and which end it.
func TestTracedPass(t *testing.T) {
	tests := []struct {
		name  string
		phase phase
		kind  stepKind
		want  timeline.Pass
	}{
		{name: "sync", kind: stepSync, want: timeline.Pass{}},
		{name: "idle while running", kind: stepIdle, want: timeline.Pass{}},
		{name: "stop", kind: stepStop, want: timeline.Pass{Ending: true, Reason: timeline.EndCompleted, GracePeriod: 30}},
		{name: "release", phase: phaseTerminated, kind: stepRelease, want: timeline.Pass{Ending: true, Reason: timeline.EndCompleted}},
		{name: "ended and kept", phase: phaseTerminated, kind: stepIdle, want: timeline.Pass{Outcome: timeline.EndedKept}},
		{name: "cleaned, the deletion confirmed", phase: phaseCleaned, kind: stepIdle, want: timeline.Pass{Outcome: timeline.EndedCleaned}},
		{name: "done", phase: phaseCleaned, kind: stepDone, want: timeline.Pass{Outcome: timeline.EndedCleaned}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := step{kind: tt.kind}
			if tt.kind == stepStop {
				s.begin, s.grace = &ending{}, 30
			}
			if got := tracedPass(&podState{phase: tt.phase}, s, basePod(), false); got != tt.want {
				t.Errorf("pass %+v, want %+v", got, tt.want)
			}
		})
	}
}

// With tracing off (no provider, as the agent runs without a `tracing`
// configuration) a termination's passes cost nothing; with tracing on at
// a rate of 0 (the kubelet's default) they record nothing.
func TestTerminationTracingOff(t *testing.T) {
	pod := basePod(withPreStop)
	var tr Tracer = timeline.NewTracer(timeline.TracerConfig{})
	tp, now, ctx := timelinePod(pod), time.Now(), context.Background()
	running, ended := podState{}, podState{phase: phaseTerminated, released: true}
	stop, idle := step{kind: stepStop, begin: &ending{}, grace: 30}, step{kind: stepIdle}
	allocs := testing.AllocsPerRun(100, func() {
		pctx := tr.Pass(ctx, tp, tracedPass(&running, stop, pod, false), now)
		_, s := tr.Step(pctx, tp, "stopContainer:a", now)
		s.End(now, nil)
		tr.Pass(ctx, tp, tracedPass(&ended, idle, pod, false), now)
		tr.Forget(pod.UID, now)
	})
	if allocs != 0 {
		t.Errorf("a termination's tracing allocates %v times with tracing off", allocs)
	}

	h := newHarness(t, pod)
	withFakeProbes(h)
	exp, ledger := withTracing(t, h, sdktrace.NeverSample())
	h.sync(pod, false)
	deleted := deletedPod(pod, 30)
	h.sync(deleted, false)
	h.sync(deleted, false)
	if !h.sync(deleted, true) {
		t.Fatal("worker not done after removal")
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("%d spans recorded at a sampling rate of 0", len(spans))
	}
	if open := ledger.unended(); len(open) != 0 {
		t.Errorf("spans never ended: %v", open)
	}
}
