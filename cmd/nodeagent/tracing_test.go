package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// No `tracing`, no tracing: nothing to export to, nothing on the CRI
// connection, no provider for the pod steps.
func TestTracingOff(t *testing.T) {
	tr, err := newTracing(context.Background(), nil, "node-1", "v1")
	if err != nil || tr != nil {
		t.Fatalf("newTracing(nil) = %v, %v", tr, err)
	}
	if tr.tracerProvider() != nil || tr.criStatsHandlers() != nil || tr.shutdown(context.Background()) != nil {
		t.Error("tracing off still traces")
	}
}

// The sampler is component-base's: new traces at samplingRatePerMillion,
// none without it, a parent's decision followed.
func TestTracingSampler(t *testing.T) {
	tests := []struct {
		name string
		rate *int32
		want string
	}{
		{name: "unset", want: "ParentBased{root:AlwaysOffSampler"},
		{name: "zero", rate: ptr.To[int32](0), want: "ParentBased{root:AlwaysOffSampler"},
		{name: "one in a thousand", rate: ptr.To[int32](1000), want: "ParentBased{root:TraceIDRatioBased{0.001}"},
		{name: "all", rate: ptr.To[int32](1000000), want: "ParentBased{root:TraceIDRatioBased{1}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tracingSampler(&tracingapi.TracingConfiguration{SamplingRatePerMillion: tt.rate}).Description()
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("sampler %s, want %s...", got, tt.want)
			}
		})
	}
}

func TestValidateTracing(t *testing.T) {
	tests := []struct {
		name    string
		tc      *tracingapi.TracingConfiguration
		wantErr string
	}{
		{name: "unset"},
		{name: "host and port", tc: &tracingapi.TracingConfiguration{Endpoint: ptr.To("127.0.0.1:4317"), SamplingRatePerMillion: ptr.To[int32](100)}},
		{name: "unix socket", tc: &tracingapi.TracingConfiguration{Endpoint: ptr.To("unix:///run/otel.sock")}},
		{name: "rate above a million", tc: &tracingapi.TracingConfiguration{SamplingRatePerMillion: ptr.To[int32](1000001)},
			wantErr: "tracing.samplingRatePerMillion"},
		{name: "negative rate", tc: &tracingapi.TracingConfiguration{SamplingRatePerMillion: ptr.To[int32](-1)},
			wantErr: "tracing.samplingRatePerMillion"},
		{name: "http endpoint", tc: &tracingapi.TracingConfiguration{Endpoint: ptr.To("http://collector:4317")},
			wantErr: "tracing.endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := validateTracing(tt.tc)
			switch {
			case tt.wantErr == "" && len(errs) > 0:
				t.Errorf("errors %v", errs)
			case tt.wantErr != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.wantErr)):
				t.Errorf("errors %v, want one naming %s", errs, tt.wantErr)
			}
		})
	}
}

// A collector that is not there does not hold up the agent's start, nor
// its stop when there is nothing to export (with spans to export, the
// stop waits at most tracingShutdownWait).
func TestTracingToAbsentCollector(t *testing.T) {
	tr, err := newTracing(context.Background(), &tracingapi.TracingConfiguration{
		Endpoint: ptr.To("127.0.0.1:1"), SamplingRatePerMillion: ptr.To[int32](1000000)}, "node-1", "v1")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := tr.shutdown(context.Background()); err != nil || time.Since(start) > time.Second {
		t.Errorf("shutdown with no span to export: %v after %v", err, time.Since(start))
	}
}

// metadataCRI answers Version and keeps the metadata the call came with.
type metadataCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	got chan metadata.MD
}

func (f *metadataCRI) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.got <- md
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeApiVersion: "v1"}, nil
}

// The CRI calls are spans below the span of the step that makes them,
// and carry its trace to the runtime (W3C traceparent), as the kubelet's.
func TestCRICallsCarryTraceContext(t *testing.T) {
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "cri.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &metadataCRI{got: make(chan metadata.MD, 1)}
	runtimeapi.RegisterRuntimeServiceServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	exp := tracetest.NewInMemoryExporter()
	tr := &tracing{provider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))}
	cri, err := runtime.NewClient(runtime.Config{Endpoint: "unix://" + socket, StatsHandlers: tr.criStatsHandlers()})
	if err != nil {
		t.Fatal(err)
	}
	defer cri.Close()

	ctx, step := tr.provider.Tracer("test").Start(context.Background(), "sandbox")
	if _, err := cri.Version(ctx); err != nil {
		t.Fatal(err)
	}
	step.End()
	md := <-fake.got
	tp := md.Get("traceparent")
	if len(tp) != 1 || !strings.Contains(tp[0], step.SpanContext().TraceID().String()) {
		t.Errorf("the runtime got traceparent %v, want the step's trace %s", tp, step.SpanContext().TraceID())
	}
	var call *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "runtime.v1.RuntimeService/Version" {
			call = &s
		}
	}
	if call == nil || call.Parent.SpanID() != step.SpanContext().SpanID() {
		t.Errorf("the CRI call's span %+v is not a child of the step's", call)
	}
	if err := tr.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
