package metrics

import (
	"context"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc"
)

// criOperations maps CRI methods to the operation_type the kubelet's
// instrumented runtime service records them under, where that is not
// simply the method in snake case.
var criOperations = map[string]string{
	"RunPodSandbox":             "run_podsandbox",
	"StopPodSandbox":            "stop_podsandbox",
	"RemovePodSandbox":          "remove_podsandbox",
	"PodSandboxStatus":          "podsandbox_status",
	"ListPodSandbox":            "list_podsandbox",
	"PodSandboxStats":           "podsandbox_stats",
	"ListPodSandboxStats":       "list_podsandbox_stats",
	"ListPodSandboxMetrics":     "list_podsandbox_metrics",
	"UpdatePodSandboxResources": "update_podsandbox_resources",
	"ImageFsInfo":               "image_fs_info",
	"RuntimeConfig":             "runtime_config",
}

// criOperation names a CRI call ("/runtime.v1.RuntimeService/ListPodSandbox")
// as the kubelet's runtime metrics do ("list_podsandbox").
func criOperation(fullMethod string) string {
	name := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	if op, ok := criOperations[name]; ok {
		return op
	}
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// RuntimeInterceptor counts and times every unary CRI call, and counts
// its errors, as kubelet_runtime_operations_total,
// kubelet_runtime_operations_duration_seconds and
// kubelet_runtime_operations_errors_total.
func (m *Metrics) RuntimeInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		op := criOperation(method)
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		m.runtimeOperations.WithLabelValues(op).Inc()
		m.runtimeOperationsDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
		if err != nil {
			m.runtimeOperationsErrors.WithLabelValues(op).Inc()
		}
		return err
	}
}
