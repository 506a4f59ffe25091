package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// fakeSummary returns a fixed summary, or an error, and records what it
// was asked for.
type fakeSummary struct {
	summary *statsapi.Summary
	err     error
	asked   []bool
}

func (f *fakeSummary) Summary(_ context.Context, only bool) (*statsapi.Summary, error) {
	f.asked = append(f.asked, only)
	if f.err != nil {
		return nil, f.err
	}
	return f.summary, nil
}

func u(v uint64) *uint64 { return &v }

func testSummary() *statsapi.Summary {
	at := metav1.NewTime(time.Unix(1_800_000_000, 0))
	started := metav1.NewTime(time.Unix(1_799_999_000, 500_000_000))
	return &statsapi.Summary{
		Node: statsapi.NodeStats{
			NodeName: "node-1",
			CPU:      &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: u(12_500_000_000), UsageNanoCores: u(300_000_000)},
			Memory:   &statsapi.MemoryStats{Time: at, WorkingSetBytes: u(1 << 30)},
		},
		Pods: []statsapi.PodStats{{
			PodRef: statsapi.PodReference{Name: "web", Namespace: "default", UID: "u1"},
			CPU:    &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: u(2_000_000_000)},
			Memory: &statsapi.MemoryStats{Time: at, WorkingSetBytes: u(100 << 20)},
			Containers: []statsapi.ContainerStats{{
				Name: "app", StartTime: started,
				CPU:    &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: u(1_500_000_000)},
				Memory: &statsapi.MemoryStats{Time: at, WorkingSetBytes: u(90 << 20)},
			}},
		}},
	}
}

func monitoringAPI(a *api) http.Handler {
	if a.pods == nil {
		a.pods = func() []*v1.Pod { return nil }
	}
	return a.routes()
}

func get(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec
}

func TestStatsSummary(t *testing.T) {
	fs := &fakeSummary{summary: testSummary()}
	h := monitoringAPI(&api{stats: fs})
	rec := get(t, h, "/stats/summary")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /stats/summary: %d %s", rec.Code, rec.Body)
	}
	var got statsapi.Summary
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Node.NodeName != "node-1" || *got.Node.CPU.UsageNanoCores != 300_000_000 || len(got.Pods) != 1 || got.Pods[0].Containers[0].Name != "app" {
		t.Errorf("summary = %+v", got)
	}
	// The names metrics-server reads.
	for _, field := range []string{`"usageNanoCores":300000000`, `"usageCoreNanoSeconds":12500000000`, `"workingSetBytes":1073741824`, `"podRef":{"name":"web"`} {
		if !strings.Contains(rec.Body.String(), field) {
			t.Errorf("summary JSON lacks %s: %s", field, rec.Body)
		}
	}
	get(t, h, "/stats/summary?only_cpu_and_memory=true")
	get(t, h, "/stats/summary?only_cpu_and_memory=false")
	rec = httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/stats/summary", strings.NewReader("only_cpu_and_memory=true"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	h.ServeHTTP(rec, req)
	if want := []bool{false, true, false, true}; len(fs.asked) != 4 || fs.asked[1] != want[1] || fs.asked[2] != want[2] || fs.asked[3] != want[3] {
		t.Errorf("asked for only cpu and memory: %v, want %v", fs.asked, want)
	}

	fs.err = errors.New("root cgroup gone")
	rec = get(t, h, "/stats/summary")
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "Internal Error: root cgroup gone") {
		t.Errorf("failing summary: %d %s", rec.Code, rec.Body)
	}
	if rec := get(t, h, "/stats/other"); rec.Code != http.StatusNotFound {
		t.Errorf("GET /stats/other: %d", rec.Code)
	}
}

func parseMetrics(t *testing.T, body string) map[string]model.Vector {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	out := map[string]model.Vector{}
	for name, fam := range fams {
		vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, fam)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = vec
	}
	return out
}

func TestResourceMetrics(t *testing.T) {
	fs := &fakeSummary{summary: testSummary()}
	h := monitoringAPI(&api{stats: fs})
	rec := get(t, h, "/metrics/resource")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics/resource: %d %s", rec.Code, rec.Body)
	}
	body := rec.Body.String()
	m := parseMetrics(t, body)
	one := func(name string, labels map[string]string) *model.Sample {
		t.Helper()
		for _, s := range m[name] {
			ok := true
			for k, v := range labels {
				ok = ok && string(s.Metric[model.LabelName(k)]) == v
			}
			if ok {
				return s
			}
		}
		t.Fatalf("no %s%v in:\n%s", name, labels, body)
		return nil
	}
	at := model.TimeFromUnix(1_800_000_000)
	c := map[string]string{"container": "app", "pod": "web", "namespace": "default"}
	p := map[string]string{"pod": "web", "namespace": "default"}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		value  float64
		ts     model.Time
	}{
		{"node_cpu_usage_seconds_total", nil, 12.5, at},
		{"node_memory_working_set_bytes", nil, 1 << 30, at},
		{"container_cpu_usage_seconds_total", c, 1.5, at},
		{"container_memory_working_set_bytes", c, 90 << 20, at},
		{"pod_cpu_usage_seconds_total", p, 2, at},
		{"pod_memory_working_set_bytes", p, 100 << 20, at},
		{"scrape_error", nil, 0, 0},
		{"resource_scrape_error", nil, 0, 0},
	} {
		s := one(tt.name, tt.labels)
		if float64(s.Value) != tt.value || (tt.ts != 0 && s.Timestamp != tt.ts) {
			t.Errorf("%s = %v at %v, want %v at %v", tt.name, s.Value, s.Timestamp, tt.value, tt.ts)
		}
	}
	if s := one("container_start_time_seconds", c); float64(s.Value) != 1_799_999_000.5 {
		t.Errorf("container start time = %v", s.Value)
	}
	if !strings.Contains(body, "# TYPE node_cpu_usage_seconds_total counter") ||
		!strings.Contains(body, "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds") {
		t.Errorf("types or help not the kubelet's:\n%s", body)
	}
	if len(fs.asked) != 1 || !fs.asked[0] {
		t.Errorf("resource metrics asked for %v, want the cpu-and-memory summary", fs.asked)
	}

	fs.err = errors.New("runtime down")
	m = parseMetrics(t, get(t, h, "/metrics/resource").Body.String())
	if len(m["scrape_error"]) != 1 || m["scrape_error"][0].Value != 1 || m["resource_scrape_error"][0].Value != 1 || len(m["node_cpu_usage_seconds_total"]) != 0 {
		t.Errorf("failed scrape = %v", m)
	}
}

func TestMonitoringRoutesOnlyWhenConfigured(t *testing.T) {
	h := monitoringAPI(&api{})
	for _, path := range []string{"/stats/summary", "/metrics", "/metrics/resource", "/metrics/probes", "/configz"} {
		if rec := get(t, h, path); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s without a source: %d", path, rec.Code)
		}
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("m:" + r.URL.Path)) })
	h = monitoringAPI(&api{metrics: ok, probeMetrics: ok})
	if rec := get(t, h, "/metrics"); rec.Body.String() != "m:/metrics" {
		t.Errorf("/metrics = %q", rec.Body)
	}
	if rec := get(t, h, "/metrics/probes"); rec.Body.String() != "m:/metrics/probes" {
		t.Errorf("/metrics/probes = %q", rec.Body)
	}
}

func TestConfigz(t *testing.T) {
	kc := &kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{Kind: "KubeletConfiguration", APIVersion: "kubelet.config.k8s.io/v1beta1"},
		MaxPods:  42,
	}
	rec := get(t, monitoringAPI(&api{configz: kc, debugging: true}), "/configz")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /configz: %d %s", rec.Code, rec.Body)
	}
	var got struct {
		KubeletConfig kubeletv1beta1.KubeletConfiguration `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.KubeletConfig.MaxPods != 42 || got.KubeletConfig.Kind != "KubeletConfiguration" || got.KubeletConfig.APIVersion != "kubelet.config.k8s.io/v1beta1" {
		t.Errorf("configz = %s", rec.Body)
	}
}

func TestProfilingGates(t *testing.T) {
	tests := []struct {
		name                 string
		debugging, profiling bool
		path                 string
		code                 int
		body                 string
	}{
		{"debugging off", false, true, "/debug/pprof/", http.StatusMethodNotAllowed, "Debug endpoints are disabled."},
		{"profiling off", true, false, "/debug/pprof/heap", http.StatusMethodNotAllowed, "profiling endpoint is disabled."},
		{"index", true, true, "/debug/pprof/", http.StatusOK, "goroutine"},
		{"bare path, no redirect", true, true, "/debug/pprof", http.StatusOK, "goroutine"},
		{"cmdline", true, true, "/debug/pprof/cmdline", http.StatusOK, ""},
		{"heap", true, true, "/debug/pprof/heap?debug=1", http.StatusOK, "heap profile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := get(t, monitoringAPI(&api{debugging: tt.debugging, profilingOn: tt.profiling}), tt.path)
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.body) {
				t.Errorf("GET %s: %d %.200s, want %d with %q", tt.path, rec.Code, rec.Body, tt.code, tt.body)
			}
		})
	}
}

// With enableDebuggingHandlers false the kubelet answers the streams, run,
// the logs and runningpods with 405 whatever the method, and has no
// /configz; pods, stats and metrics stay.
func TestDebuggingHandlersOff(t *testing.T) {
	rt := &fakeRuntime{}
	pod := testPod()
	tests := []struct {
		name   string
		method string
		path   string
		code   int
	}{
		{"exec", http.MethodPost, "/exec/default/web/app?command=ls&output=1", http.StatusMethodNotAllowed},
		{"exec with uid", http.MethodGet, "/exec/default/web/uid-1/app?command=ls&output=1", http.StatusMethodNotAllowed},
		{"attach", http.MethodPost, "/attach/default/web/app?output=1", http.StatusMethodNotAllowed},
		{"port-forward", http.MethodGet, "/portForward/default/web", http.StatusMethodNotAllowed},
		{"container logs", http.MethodGet, "/containerLogs/default/web/app", http.StatusMethodNotAllowed},
		{"run", http.MethodPost, "/run/default/web/app?cmd=ls", http.StatusMethodNotAllowed},
		{"running pods", http.MethodGet, "/runningpods/", http.StatusMethodNotAllowed},
		{"running pods, bare", http.MethodGet, "/runningpods", http.StatusMethodNotAllowed},
		{"system logs", http.MethodGet, "/logs/", http.StatusMethodNotAllowed},
		{"pprof", http.MethodGet, "/debug/pprof/", http.StatusMethodNotAllowed},
		{"configz is not installed", http.MethodGet, "/configz", http.StatusNotFound},
		{"pods stay", http.MethodGet, "/pods", http.StatusOK},
		{"healthz stays", http.MethodGet, "/healthz", http.StatusOK},
		{"stats stay", http.MethodGet, "/stats/summary", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := testAPI(rt, pod)
			a.debugging = false
			a.profilingOn = true
			a.configz = map[string]string{"kind": "KubeletConfiguration"}
			a.stats = &fakeSummary{summary: testSummary()}
			rec := httptest.NewRecorder()
			a.routes().ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			if rec.Code != tt.code {
				t.Fatalf("%s %s: %d %q, want %d", tt.method, tt.path, rec.Code, rec.Body, tt.code)
			}
			if tt.code == http.StatusMethodNotAllowed && rec.Body.String() != "Debug endpoints are disabled.\n" {
				t.Errorf("body %q, want the kubelet's", rec.Body)
			}
		})
	}
	if len(rt.execs)+len(rt.attaches)+len(rt.forwards)+len(rt.syncs) != 0 {
		t.Errorf("the runtime was asked to stream or run: %d %d %d %d", len(rt.execs), len(rt.attaches), len(rt.forwards), len(rt.syncs))
	}
}
