package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The runtime's calls: what an agent asks of containerd while the pods start, by CRI
// method, counted by containerd itself (grpc_server_handled_total on its metrics address,
// harness.Config.RuntimeMetricsAddr) at both ends of the span. Both sides run against the
// same containerd, so the difference of the two counts is the agent's (and, for the floor,
// the bench's own calls).

// criServices are the gRPC services of the CRI; calls to containerd's own API (the
// harness, ctr) are left out.
var criServices = map[string]string{
	"runtime.v1.RuntimeService": "",
	"runtime.v1.ImageService":   "",
}

// freeLoopbackAddr is a loopback address with a port nothing listens on now.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// readRuntimeCalls reads containerd's count of handled CRI calls by method from its
// metrics at url.
func readRuntimeCalls(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("runtime metrics: %s", resp.Status)
	}
	return parseRuntimeCalls(resp.Body)
}

// parseRuntimeCalls sums grpc_server_handled_total over codes, by CRI method.
func parseRuntimeCalls(r io.Reader) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("runtime metrics: %w", err)
	}
	out := map[string]float64{}
	fam, ok := fams["grpc_server_handled_total"]
	if !ok {
		return out, nil
	}
	for _, m := range fam.GetMetric() {
		var service, method string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "grpc_service":
				service = l.GetValue()
			case "grpc_method":
				method = l.GetValue()
			}
		}
		if _, ok := criServices[service]; !ok || method == "" {
			continue
		}
		out[method] += m.GetCounter().GetValue()
	}
	return out, nil
}

// callsBetween is the calls made between two readings, by method; a method without calls
// is left out.
func callsBetween(from, to map[string]float64) map[string]float64 {
	if from == nil || to == nil {
		return nil
	}
	out := map[string]float64{}
	for method, v := range to {
		if d := v - from[method]; d > 0 {
			out[method] = d
		}
	}
	return out
}

// writeRuntimeCallsTables prints the CRI calls by method and side: made while the pods
// started (CPUStart's), and per minute over the hold with the pods running.
func writeRuntimeCallsTables(w io.Writer, sides map[string]sideResult, n int) {
	starts, held := map[string][]map[string]float64{}, map[string][]map[string]float64{}
	for side, s := range sides {
		for _, r := range s.Rounds {
			if r.CPUStart != nil && r.CPUStart.RuntimeCalls != nil {
				starts[side] = append(starts[side], r.CPUStart.RuntimeCalls)
			}
		}
		held[side] = s.RuntimeCallsHeld
	}
	writeCallsTable(w, fmt.Sprintf("CRI calls while the %d pods start, by method (containerd's count, medians over rounds):", n), starts)
	writeCallsTable(w, fmt.Sprintf("CRI calls per minute over the hold with %d pods running, by method (containerd's count, medians over rounds):", n), held)
}

// writeCallsTable prints one Markdown table of calls by method (rows, the most called on
// any side first) and side (columns: nodeagent, kubelet, floor), each cell the median
// over the side's rounds. Nothing when no side has a round.
func writeCallsTable(w io.Writer, title string, rounds map[string][]map[string]float64) {
	var names []string
	med := map[string]map[string]float64{}
	peak := map[string]float64{}
	for _, side := range []string{"nodeagent", "kubelet", "floor"} {
		rs := rounds[side]
		if len(rs) == 0 {
			continue
		}
		byMethod := map[string][]float64{}
		for _, r := range rs {
			for m, v := range r {
				byMethod[m] = append(byMethod[m], v)
			}
		}
		names = append(names, side)
		med[side] = map[string]float64{}
		for m, vs := range byMethod {
			for len(vs) < len(rs) { // a method missing from a round had no calls there
				vs = append(vs, 0)
			}
			med[side][m], _, _, _ = summary(vs)
			peak[m] = max(peak[m], med[side][m])
		}
	}
	if len(names) == 0 {
		return
	}
	methods := largestFirst(peak)
	fmt.Fprintf(w, "\n%s\n\n", title)
	fmt.Fprintln(w, "| method | "+strings.Join(names, " | ")+" |")
	fmt.Fprintln(w, "|---"+strings.Repeat("|---", len(names))+"|")
	total := map[string]float64{}
	for _, m := range methods {
		line := "| " + m
		for _, side := range names {
			line += fmt.Sprintf(" | %.4g", med[side][m])
			total[side] += med[side][m]
		}
		fmt.Fprintln(w, line+" |")
	}
	line := "| all methods (sum of the medians)"
	for _, side := range names {
		line += fmt.Sprintf(" | %.4g", total[side])
	}
	fmt.Fprintln(w, line+" |")
}

// perMinute scales calls counted over d to a minute.
func perMinute(calls map[string]float64, d time.Duration) map[string]float64 {
	if calls == nil || d <= 0 {
		return nil
	}
	out := make(map[string]float64, len(calls))
	for m, v := range calls {
		out[m] = v / d.Minutes()
	}
	return out
}
