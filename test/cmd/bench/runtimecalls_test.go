package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// What containerd's metrics address serves, trimmed: CRI methods under two codes, a
// containerd API method, and a metric of another name.
const runtimeMetricsText = `# HELP grpc_server_handled_total Total number of RPCs completed on the server, regardless of success or failure.
# TYPE grpc_server_handled_total counter
grpc_server_handled_total{grpc_code="OK",grpc_method="ListPodSandboxStats",grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 12
grpc_server_handled_total{grpc_code="Unknown",grpc_method="ListPodSandboxStats",grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 3
grpc_server_handled_total{grpc_code="OK",grpc_method="PullImage",grpc_service="runtime.v1.ImageService",grpc_type="unary"} 1
grpc_server_handled_total{grpc_code="OK",grpc_method="List",grpc_service="containerd.services.containers.v1.Containers",grpc_type="unary"} 40
# HELP grpc_server_started_total Total number of RPCs started on the server.
# TYPE grpc_server_started_total counter
grpc_server_started_total{grpc_method="ListPodSandboxStats",grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 99
`

func TestParseRuntimeCalls(t *testing.T) {
	got, err := parseRuntimeCalls(strings.NewReader(runtimeMetricsText))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"ListPodSandboxStats": 15, "PullImage": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v (codes summed, containerd's own API left out)", got, want)
	}
	if _, err := parseRuntimeCalls(strings.NewReader("grpc_server_handled_total{ 1\n")); err == nil {
		t.Error("a broken exposition parsed")
	}
	none, err := parseRuntimeCalls(strings.NewReader("# nothing\n"))
	if err != nil || len(none) != 0 {
		t.Errorf("no calls yet: %v, %v", none, err)
	}
}

func TestReadRuntimeCalls(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, runtimeMetricsText)
	}))
	defer srv.Close()
	got, err := readRuntimeCalls(context.Background(), srv.URL+"/v1/metrics")
	if err != nil || got["ListPodSandboxStats"] != 15 {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := readRuntimeCalls(context.Background(), srv.URL+"/metrics"); err == nil {
		t.Error("a 404 read as calls")
	}
}

func TestCallsBetween(t *testing.T) {
	from := map[string]float64{"ListContainers": 10, "Version": 2}
	to := map[string]float64{"ListContainers": 25, "Version": 2, "RunPodSandbox": 3}
	got := callsBetween(from, to)
	want := map[string]float64{"ListContainers": 15, "RunPodSandbox": 3}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if callsBetween(nil, to) != nil || callsBetween(from, nil) != nil {
		t.Error("a missing reading gave calls")
	}
	s := splitCPU(cpuSample{busy: 1, cores: 2, calls: from}, cpuSample{busy: 2, cores: 2, calls: to})
	if fmt.Sprint(s.RuntimeCalls) != fmt.Sprint(want) {
		t.Errorf("the split's calls: %v", s.RuntimeCalls)
	}
}

func TestRuntimeCallsTables(t *testing.T) {
	round := func(calls map[string]float64) roundResult {
		return roundResult{CPUStart: &cpuSplit{Components: map[string]float64{}, RuntimeCalls: calls}}
	}
	sides := map[string]sideResult{
		"nodeagent": {
			Rounds:           []roundResult{round(map[string]float64{"ListContainers": 40, "RunPodSandbox": 10}), round(map[string]float64{"ListContainers": 60}), round(map[string]float64{"ListContainers": 50})},
			RuntimeCallsHeld: []map[string]float64{{"ListContainers": 60}},
		},
		// A round without the runtime's count (its metrics unread) is left out.
		"kubelet": {Rounds: []roundResult{round(map[string]float64{"ListContainers": 20, "ContainerStats": 500}), round(nil)}},
	}
	var b bytes.Buffer
	writeRuntimeCallsTables(&b, sides, 10)
	tables := strings.Split(strings.TrimSpace(b.String()), "\n\n")
	// The start's title and table, the hold's title and table.
	if len(tables) != 4 {
		t.Fatalf("%d parts:\n%s", len(tables), b.String())
	}
	start := strings.Split(tables[1], "\n")
	want := []string{
		"| method | nodeagent | kubelet |",
		"|---|---|---|",
		"| ContainerStats | 0 | 500 |",
		// A method missing from a round had no calls there: RunPodSandbox's median of 10,
		// 0 and 0 is 0.
		"| ListContainers | 50 | 20 |",
		"| RunPodSandbox | 0 | 0 |",
		"| all methods (sum of the medians) | 50 | 520 |",
	}
	if strings.Join(start, "\n") != strings.Join(want, "\n") {
		t.Errorf("the start's table:\n%s\nwant:\n%s", tables[1], strings.Join(want, "\n"))
	}
	if !strings.Contains(tables[2], "per minute over the hold with 10 pods") || tables[3] != "| method | nodeagent |\n|---|---|\n| ListContainers | 60 |\n| all methods (sum of the medians) | 60 |" {
		t.Errorf("the hold's table:\n%s\n%s", tables[2], tables[3])
	}
	var none bytes.Buffer
	writeRuntimeCallsTables(&none, map[string]sideResult{"kubelet": {Rounds: []roundResult{round(nil)}}}, 10)
	if none.Len() != 0 {
		t.Errorf("tables without calls: %q", none.String())
	}
}

func TestPerMinute(t *testing.T) {
	got := perMinute(map[string]float64{"ListContainers": 30, "Version": 1}, 30*time.Second)
	if got["ListContainers"] != 60 || got["Version"] != 2 {
		t.Errorf("got %v", got)
	}
	if perMinute(nil, time.Minute) != nil || perMinute(map[string]float64{"x": 1}, 0) != nil {
		t.Error("no calls, or no time, gave a rate")
	}
}
