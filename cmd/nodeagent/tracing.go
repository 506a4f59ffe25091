package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/stats"
	"k8s.io/apimachinery/pkg/util/validation/field"
	tracingapi "k8s.io/component-base/tracing/api/v1"
)

// tracingServiceName is the service.name of the agent's spans. nodeagent
// is a drop-in replacement for the kubelet, so it reports as the kubelet
// does: dashboards and queries written for the kubelet's traces
// (service.name=kubelet, host.name=<node>) find the agent's as they are.
// The resource says which agent it is with process.executable.name
// (nodeagent) and nodeagent.version.
const tracingServiceName = "kubelet"

// tracingShutdownWait bounds the flush of the spans not yet exported when
// the agent stops.
const tracingShutdownWait = 5 * time.Second

// tracing is the agent's tracing as the KubeletConfiguration's `tracing`
// asks for it: nil when it asks for none, which costs nothing beyond a
// nil check per pod step.
type tracing struct {
	provider *sdktrace.TracerProvider
}

// newTracing builds the tracer provider of the kubelet's `tracing`
// configuration, with the kubelet's semantics (component-base's): spans
// go in batches to the OTLP gRPC endpoint (localhost:4317, or what the
// OTEL_EXPORTER_OTLP_* variables say, when unset), without TLS; new
// traces are sampled at samplingRatePerMillion (none when unset or 0),
// and a sampled parent's children always. The exporter connects lazily:
// a collector that is down costs spans, never the agent's start.
func newTracing(ctx context.Context, tc *tracingapi.TracingConfiguration, hostname, version string) (*tracing, error) {
	if tc == nil {
		return nil, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithInsecure()}
	if tc.Endpoint != nil {
		opts = append(opts, otlptracegrpc.WithEndpoint(*tc.Endpoint))
	}
	exporter, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(
		semconv.ServiceName(tracingServiceName),
		semconv.HostName(hostname),
		semconv.ProcessExecutableName("nodeagent"),
		attribute.String("nodeagent.version", version),
	)
	return &tracing{provider: sdktrace.NewTracerProvider(
		sdktrace.WithSampler(tracingSampler(tc)),
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(res),
	)}, nil
}

// tracingSampler samples new traces at samplingRatePerMillion, none when
// it is unset or 0, and follows a parent's decision.
func tracingSampler(tc *tracingapi.TracingConfiguration) sdktrace.Sampler {
	root := sdktrace.NeverSample()
	if r := tc.SamplingRatePerMillion; r != nil && *r > 0 {
		root = sdktrace.TraceIDRatioBased(float64(*r) / 1e6)
	}
	return sdktrace.ParentBased(root)
}

// validateTracing checks `tracing` as the kubelet does: a sampling rate
// within [0, 1000000], an endpoint gRPC can dial.
func validateTracing(tc *tracingapi.TracingConfiguration) []error {
	var errs []error
	for _, e := range tracingapi.ValidateTracingConfiguration(tc, nil, field.NewPath("tracing")) {
		errs = append(errs, e)
	}
	return errs
}

// tracerProvider is the provider pod steps are traced with; nil when
// tracing is off.
func (t *tracing) tracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// criStatsHandlers trace the calls to the runtime as the kubelet's CRI
// client does: a span per call, child of the step that makes it, and the
// trace context sent along (W3C traceparent and baggage metadata) so
// that the runtime's own spans join the pod's trace.
func (t *tracing) criStatsHandlers() []stats.Handler {
	if t == nil {
		return nil
	}
	return []stats.Handler{otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(t.provider),
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelgrpc.WithMessageEvents(otelgrpc.ReceivedEvents, otelgrpc.SentEvents),
	)}
}

// shutdown exports the spans still buffered, within tracingShutdownWait.
// ctx may be done already: the agent is stopping.
func (t *tracing) shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownWait)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush spans: %w", err)
	}
	return nil
}
