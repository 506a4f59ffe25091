package sync

import (
	"context"
	"sort"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
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
		"  podCgroup",
		"  pullImage:a",
		"  createContainer:a",
		"    runtime.v1.RuntimeService/CreateContainer",
		"  startContainer:a",
		"    runtime.v1.RuntimeService/StartContainer",
		"  podCgroup",
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
