package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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

func TestRuntimeCallsTable(t *testing.T) {
	round := func(calls map[string]float64) roundResult {
		return roundResult{CPUStart: &cpuSplit{Components: map[string]float64{}, RuntimeCalls: calls}}
	}
	sides := map[string]sideResult{
		"nodeagent": {Rounds: []roundResult{round(map[string]float64{"ListContainers": 40, "RunPodSandbox": 10}), round(map[string]float64{"ListContainers": 60}), round(map[string]float64{"ListContainers": 50})}},
		"kubelet":   {Rounds: []roundResult{round(map[string]float64{"ListContainers": 20, "ContainerStats": 500})}},
	}
	var b bytes.Buffer
	writeRuntimeCallsTable(&b, sides, 10)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// Title, a blank line, header, rule, three methods.
	if len(lines) != 7 {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	if lines[2] != "| method | nodeagent | kubelet |" {
		t.Errorf("header %q", lines[2])
	}
	if lines[4] != "| ContainerStats | 0 [0] | 500 [50] |" {
		t.Errorf("most called first: %q", lines[4])
	}
	// A method missing from a round had no calls there: RunPodSandbox's median of 10, 0
	// and 0 is 0.
	if lines[5] != "| ListContainers | 50 [5] | 20 [2] |" || lines[6] != "| RunPodSandbox | 0 [0] | 0 [0] |" {
		t.Errorf("rows %q, %q", lines[5], lines[6])
	}
	var none bytes.Buffer
	writeRuntimeCallsTable(&none, map[string]sideResult{"kubelet": {Rounds: []roundResult{round(nil)}}}, 10)
	if none.Len() != 0 {
		t.Errorf("a table without calls: %q", none.String())
	}
}
