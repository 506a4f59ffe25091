package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
)

// scrape gets h's text exposition, parsed, and the raw text.
func scrape(t *testing.T, h http.Handler) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	text := rec.Body.String()
	fams, err := testutil.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse scrape: %v\n%s", err, text)
	}
	return fams, text
}

// sample finds the sample of family name with the labels given (pairs).
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	t.Helper()
	fam, ok := fams[name]
	if !ok {
		t.Fatalf("no %s in the scrape", name)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range fam.GetMetric() {
		if testutil.LabelsMatch(m, want) {
			return m
		}
	}
	t.Fatalf("no %s%v in the scrape", name, want)
	return nil
}

func TestCRIOperationNames(t *testing.T) {
	for method, want := range map[string]string{
		"/runtime.v1.RuntimeService/ListPodSandbox":      "list_podsandbox",
		"/runtime.v1.RuntimeService/RunPodSandbox":       "run_podsandbox",
		"/runtime.v1.RuntimeService/PodSandboxStatus":    "podsandbox_status",
		"/runtime.v1.RuntimeService/ListContainers":      "list_containers",
		"/runtime.v1.RuntimeService/ContainerStatus":     "container_status",
		"/runtime.v1.RuntimeService/ExecSync":            "exec_sync",
		"/runtime.v1.RuntimeService/ListPodSandboxStats": "list_podsandbox_stats",
		"/runtime.v1.RuntimeService/ReopenContainerLog":  "reopen_container_log",
		"/runtime.v1.ImageService/PullImage":             "pull_image",
		"/runtime.v1.ImageService/ImageFsInfo":           "image_fs_info",
		"/runtime.v1.RuntimeService/Version":             "version",
	} {
		if got := criOperation(method); got != want {
			t.Errorf("criOperation(%q) = %q, want %q", method, got, want)
		}
	}
}

func TestRuntimeInterceptor(t *testing.T) {
	m := New()
	icpt := m.RuntimeInterceptor()
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	fail := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return errors.New("boom")
	}
	for i := 0; i < 3; i++ {
		if err := icpt(context.Background(), "/runtime.v1.RuntimeService/ListPodSandbox", nil, nil, nil, ok); err != nil {
			t.Fatal(err)
		}
	}
	if err := icpt(context.Background(), "/runtime.v1.RuntimeService/StartContainer", nil, nil, nil, fail); err == nil {
		t.Fatal("the call's error was lost")
	}
	fams, _ := scrape(t, m.Handler())
	if v := sample(t, fams, "kubelet_runtime_operations_total", "operation_type", "list_podsandbox").GetCounter().GetValue(); v != 3 {
		t.Errorf("list_podsandbox operations = %v, want 3", v)
	}
	if v := sample(t, fams, "kubelet_runtime_operations_total", "operation_type", "start_container").GetCounter().GetValue(); v != 1 {
		t.Errorf("start_container operations = %v, want 1", v)
	}
	if v := sample(t, fams, "kubelet_runtime_operations_errors_total", "operation_type", "start_container").GetCounter().GetValue(); v != 1 {
		t.Errorf("start_container errors = %v, want 1", v)
	}
	if _, ok := fams["kubelet_runtime_operations_errors_total"]; ok {
		for _, s := range fams["kubelet_runtime_operations_errors_total"].GetMetric() {
			if testutil.LabelsMatch(s, map[string]string{"operation_type": "list_podsandbox"}) {
				t.Errorf("a successful call counted as an error")
			}
		}
	}
	if n := sample(t, fams, "kubelet_runtime_operations_duration_seconds", "operation_type", "list_podsandbox").GetHistogram().GetSampleCount(); n != 3 {
		t.Errorf("list_podsandbox durations = %d, want 3", n)
	}
}

func TestRelistAndRuntimeCounts(t *testing.T) {
	m := New()
	at := time.Unix(1_800_000_000, 0)
	m.ObserveRelist(20*time.Millisecond, 0, at)
	m.ObserveRelist(30*time.Millisecond, time.Second, at.Add(time.Second))
	m.SetRuntimeCounts(2, map[string]int{"running": 3, "exited": 1})
	fams, text := scrape(t, m.Handler())
	if n := sample(t, fams, "kubelet_pleg_relist_duration_seconds").GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("relist durations = %d, want 2", n)
	}
	if n := sample(t, fams, "kubelet_pleg_relist_interval_seconds").GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("relist intervals = %d, want 1 (the first relist has none)", n)
	}
	if v := sample(t, fams, "kubelet_pleg_last_seen_seconds").GetGauge().GetValue(); v != float64(at.Unix()+1) {
		t.Errorf("last seen = %v", v)
	}
	if v := sample(t, fams, "kubelet_running_pods").GetGauge().GetValue(); v != 2 {
		t.Errorf("running pods = %v, want 2", v)
	}
	for state, want := range map[string]float64{"running": 3, "exited": 1, "created": 0, "unknown": 0} {
		if v := sample(t, fams, "kubelet_running_containers", "container_state", state).GetGauge().GetValue(); v != want {
			t.Errorf("%s containers = %v, want %v", state, v, want)
		}
	}
	// The kubelet's help, with the stability level its framework adds.
	if !strings.Contains(text, "# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox") {
		t.Errorf("help of kubelet_running_pods not the kubelet's:\n%s", text)
	}
	// The Go runtime and process collectors are there, as on the kubelet.
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no go_goroutines")
	}
}

func TestPodMetrics(t *testing.T) {
	m := New()
	m.ObservePodWorker("create", 100*time.Millisecond)
	m.ObservePodWorker("sync", 10*time.Millisecond)
	m.ObservePodWorker("sync", 10*time.Millisecond)
	m.ObservePodStart(3 * time.Second)
	m.ObservePodStartSLI(2*time.Second, 5*time.Second)
	m.ObserveImageVolumes(1, 2, 0)
	m.ObserveImageVolumes(1, 0, 1)
	fams, _ := scrape(t, m.Handler())
	for name, want := range map[string]float64{
		"kubelet_image_volume_requested_total":       2,
		"kubelet_image_volume_mounted_succeed_total": 2,
		"kubelet_image_volume_mounted_errors_total":  1,
	} {
		if got := sample(t, fams, name).GetCounter().GetValue(); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if n := sample(t, fams, "kubelet_pod_worker_duration_seconds", "operation_type", "sync").GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("sync passes = %d, want 2", n)
	}
	h := sample(t, fams, "kubelet_pod_start_duration_seconds").GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 3 {
		t.Errorf("pod start = %d samples, sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	if s := sample(t, fams, "kubelet_pod_start_sli_duration_seconds").GetHistogram().GetSampleSum(); s != 2 {
		t.Errorf("pod start SLI sum = %v, want 2", s)
	}
	if s := sample(t, fams, "kubelet_pod_start_total_duration_seconds").GetHistogram().GetSampleSum(); s != 5 {
		t.Errorf("pod start total sum = %v, want 5", s)
	}
}

func TestRESTClientMetrics(t *testing.T) {
	m := New()
	restResult{m}.Increment(context.Background(), "200", "GET", "127.0.0.1:6443")
	restResult{m}.Increment(context.Background(), "200", "GET", "127.0.0.1:6443")
	restLatency{m}.Observe(context.Background(), "PATCH", url.URL{Host: "127.0.0.1:6443", Path: "/api/v1/pods"}, 50*time.Millisecond)
	fams, _ := scrape(t, m.Handler())
	if v := sample(t, fams, "rest_client_requests_total", "code", "200", "method", "GET", "host", "127.0.0.1:6443").GetCounter().GetValue(); v != 2 {
		t.Errorf("requests = %v, want 2", v)
	}
	if n := sample(t, fams, "rest_client_request_duration_seconds", "verb", "PATCH", "host", "127.0.0.1:6443").GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("latencies = %d, want 1", n)
	}
}

func TestProbeMetrics(t *testing.T) {
	m := New()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1"}}
	m.ObserveProbe("Readiness", ProbeSuccessful, pod, "app", 5*time.Millisecond)
	m.ObserveProbe("Readiness", ProbeSuccessful, pod, "app", 5*time.Millisecond)
	m.ObserveProbe("Readiness", ProbeFailed, pod, "app", 5*time.Millisecond)
	fams, _ := scrape(t, m.ProbesHandler())
	labels := []string{"probe_type", "Readiness", "container", "app", "pod", "web", "namespace", "ns", "pod_uid", "u1"}
	if v := sample(t, fams, "prober_probe_total", append(labels, "result", "successful")...).GetCounter().GetValue(); v != 2 {
		t.Errorf("successful = %v, want 2", v)
	}
	if v := sample(t, fams, "prober_probe_total", append(labels, "result", "failed")...).GetCounter().GetValue(); v != 1 {
		t.Errorf("failed = %v, want 1", v)
	}
	if n := sample(t, fams, "prober_probe_duration_seconds", "probe_type", "Readiness").GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("durations = %d, want 2: failures are not timed", n)
	}
	m.ForgetProbe("Readiness", pod, "app")
	fams, _ = scrape(t, m.ProbesHandler())
	if f, ok := fams["prober_probe_total"]; ok && len(f.GetMetric()) > 0 {
		t.Errorf("series left after ForgetProbe: %v", f.GetMetric())
	}
	// Probes are not on /metrics.
	all, _ := scrape(t, m.Handler())
	if _, ok := all["prober_probe_total"]; ok {
		t.Error("prober_probe_total on /metrics")
	}
}
