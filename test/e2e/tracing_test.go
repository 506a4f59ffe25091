//go:build e2e

package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"sort"
	"strings"
	gosync "sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/timeline"
	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// otlpReceiver is an OTLP gRPC trace receiver that keeps every span it
// is sent, with its resource's attributes.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    gosync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	*tracepb.Span
	resource map[string]string
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := stringAttributes(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{Span: s, resource: res})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// received is a copy of the spans received so far.
func (r *otlpReceiver) received() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

// serveOTLP starts a receiver on a free port of the loopback and returns
// it with its address; it stops when the test ends.
func serveOTLP(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	r := &otlpReceiver{}
	collectortrace.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r, lis.Addr().String()
}

func stringAttributes(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return out
}

// TestPodStartTrace: with the kubelet's tracing configuration pointed at
// an OTLP receiver and every trace sampled, a pod's start arrives as one
// trace: the pod-start span, the steps of the start below it, and the
// CRI calls below the steps. The agent is restarted with the tracing
// drop-in, so the test is not parallel and is nodeagent's only.
func TestPodStartTrace(t *testing.T) {
	requireNodeagent(t)
	ctx := framework.Context(t, 6*time.Minute)
	receiver, addr := serveOTLP(t)

	framework.RestartAgentWith(t, ctx, fmt.Sprintf("tracing:\n  endpoint: %s\n  samplingRatePerMillion: 1000000\n", addr))

	cs := framework.Client(t)
	cm, err := cs.CoreV1().ConfigMaps(podNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "tracing-"}, Data: map[string]string{"greeting": "hello"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ConfigMaps(podNS).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	pod := busyboxPod("tracing", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 3600 & wait")
	pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: harness.BusyboxImage, Command: []string{"cat", "/cfg/greeting"},
		VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}}
	pod = framework.RunReady(t, pod)

	// The steps of the start, by span name and container, as the
	// timeline shows them (TestPodTimeline).
	wantSteps := []string{"admit", "podCgroup", "volumes", "sandbox", "createContainer:init", "startContainer:init",
		"createContainer:main", "startContainer:main"}
	const wantCRI = "runtime.v1.RuntimeService/RunPodSandbox"
	var tree *spanTree
	// Spans go out in batches every 5 s.
	framework.Eventually(t, time.Minute, func() error {
		tree = podStartTree(receiver.received(), string(pod.UID))
		if tree == nil {
			return fmt.Errorf("no %s span of pod %s among %d spans received", timeline.SpanPodStart, pod.UID, len(receiver.received()))
		}
		for _, step := range wantSteps {
			if tree.find(step) == nil {
				return fmt.Errorf("no step %s below the pod's start; the trace holds %s", step, tree.names())
			}
		}
		if tree.find(wantCRI) == nil {
			return fmt.Errorf("no CRI call %s below the pod's start; the trace holds %s", wantCRI, tree.names())
		}
		return nil
	})

	root := tree.root
	if got := stringAttributes(root.GetAttributes()); got["k8s.pod.name"] != pod.Name || got["k8s.namespace.name"] != pod.Namespace ||
		got[string(timeline.AttrStartOutcome)] != timeline.StartReady {
		t.Errorf("the pod-start span's attributes: %v", got)
	}
	if got := root.resource; got["service.name"] != "kubelet" || got["process.executable.name"] != "nodeagent" {
		t.Errorf("the resource: %v, want service.name kubelet (a drop-in kubelet) and process.executable.name nodeagent", got)
	}
	// Every step of the start lies within it, and in the order taken.
	var last uint64
	for _, step := range wantSteps {
		s := tree.find(step)
		if s.GetStartTimeUnixNano() < root.GetStartTimeUnixNano() || s.GetEndTimeUnixNano() > root.GetEndTimeUnixNano() {
			t.Errorf("step %s [%d, %d] lies outside the pod's start [%d, %d]", step,
				s.GetStartTimeUnixNano(), s.GetEndTimeUnixNano(), root.GetStartTimeUnixNano(), root.GetEndTimeUnixNano())
		}
		if s.GetStartTimeUnixNano() < last {
			t.Errorf("step %s starts before the step before it; the trace holds %s", step, tree.names())
		}
		last = s.GetStartTimeUnixNano()
		if got := stringAttributes(s.GetAttributes())["k8s.pod.uid"]; got != string(pod.UID) {
			t.Errorf("step %s names pod %q, want %s", step, got, pod.UID)
		}
	}
	// The sandbox's creation is the sandbox step's call.
	if cri, step := tree.find(wantCRI), tree.find("sandbox"); string(cri.GetParentSpanId()) != string(step.GetSpanId()) {
		t.Errorf("%s is not a child of the sandbox step; the trace holds %s", wantCRI, tree.names())
	}
}

// spanTree is the part of one trace below a pod's start.
type spanTree struct {
	root  receivedSpan
	below []receivedSpan
}

// podStartTree finds the start of the pod of that UID among spans and
// gathers its descendants; nil when the start has not arrived.
func podStartTree(spans []receivedSpan, uid string) *spanTree {
	var tree *spanTree
	for _, s := range spans {
		if s.GetName() == timeline.SpanPodStart && stringAttributes(s.GetAttributes())["k8s.pod.uid"] == uid {
			tree = &spanTree{root: s}
		}
	}
	if tree == nil {
		return nil
	}
	in := map[string]bool{string(tree.root.GetSpanId()): true}
	for grew := true; grew; {
		grew = false
		for _, s := range spans {
			if string(s.GetTraceId()) != string(tree.root.GetTraceId()) || in[string(s.GetSpanId())] || !in[string(s.GetParentSpanId())] {
				continue
			}
			in[string(s.GetSpanId())] = true
			tree.below = append(tree.below, s)
			grew = true
		}
	}
	sort.Slice(tree.below, func(i, j int) bool {
		return tree.below[i].GetStartTimeUnixNano() < tree.below[j].GetStartTimeUnixNano()
	})
	return tree
}

// find is the first span below the start named name: a step as the
// timeline names it (createContainer:init: the span createContainer of
// container init), or a span's own name.
func (t *spanTree) find(name string) *receivedSpan {
	kind, container, _ := strings.Cut(name, ":")
	for i, s := range t.below {
		if s.GetName() != kind {
			continue
		}
		if container == "" || stringAttributes(s.GetAttributes())["k8s.container.name"] == container {
			return &t.below[i]
		}
	}
	return nil
}

// names lists the spans below the start, for messages.
func (t *spanTree) names() string {
	out := []string{timeline.SpanPodStart + "(" + hex.EncodeToString(t.root.GetSpanId()) + ")"}
	for _, s := range t.below {
		n := s.GetName()
		if c := stringAttributes(s.GetAttributes())["k8s.container.name"]; c != "" {
			n += ":" + c
		}
		out = append(out, n)
	}
	return "[" + strings.Join(out, " ") + "]"
}
