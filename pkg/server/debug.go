package server

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// pprofPrefix is where the Go profiler's endpoints live, as on the kubelet.
const pprofPrefix = "/debug/pprof/"

// getConfigz answers /configz with the effective configuration under the
// name the kubelet registers it as.
func (a *api) getConfigz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, map[string]any{"kubeletconfig": a.configz})
}

// profiling serves the Go profiler when enableDebuggingHandlers and
// enableProfilingHandler allow it, and otherwise says which one is off,
// with the kubelet's status and words.
func (a *api) profiling(w http.ResponseWriter, r *http.Request) {
	switch {
	case !a.debugging:
		http.Error(w, "Debug endpoints are disabled.", http.StatusMethodNotAllowed)
		return
	case !a.profilingOn:
		http.Error(w, "profiling endpoint is disabled.", http.StatusMethodNotAllowed)
		return
	}
	switch strings.TrimPrefix(r.URL.Path, pprofPrefix) {
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "cmdline":
		pprof.Cmdline(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
}

// debuggingDisabledPrefixes are the paths the kubelet answers with 405
// when enableDebuggingHandlers is false, whatever the method: the streams,
// run, the logs and the profiler (which a.profiling answers itself).
var debuggingDisabledPrefixes = []string{"/run/", "/exec/", "/attach/", "/portForward/", "/containerLogs/", "/runningpods", "/runningpods/", "/logs/"}

// debuggingDisabledRoutes answers the debugging paths with the kubelet's
// status and words when enableDebuggingHandlers is false.
func debuggingDisabledRoutes(mux *http.ServeMux) {
	disabled := func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Debug endpoints are disabled.", http.StatusMethodNotAllowed)
	}
	for _, p := range debuggingDisabledPrefixes {
		mux.HandleFunc(p, disabled)
	}
}

// monitoringRoutes adds what monitoring reads: stats, metrics, the
// configuration and the profiler.
func (a *api) monitoringRoutes(mux *http.ServeMux) {
	if a.stats != nil {
		mux.HandleFunc("GET /stats/summary", a.getSummary)
		mux.HandleFunc("POST /stats/summary", a.getSummary)
		mux.HandleFunc("GET /metrics/resource", a.getResourceMetrics)
	}
	if a.cgroups != nil {
		mux.HandleFunc("GET /metrics/cadvisor", a.getCadvisorMetrics)
	}
	if a.metrics != nil {
		mux.Handle("GET /metrics", a.metrics)
	}
	if a.probeMetrics != nil {
		mux.Handle("GET /metrics/probes", a.probeMetrics)
	}
	// The kubelet serves /configz only with its debugging handlers.
	if a.configz != nil && a.debugging {
		mux.HandleFunc("GET /configz", a.getConfigz)
	}
	// Both the bare path and the tree are routes: a redirect between them
	// must never be sent through the apiserver's proxy.
	mux.HandleFunc("GET /debug/pprof", a.profiling)
	mux.HandleFunc("GET /debug/pprof/", a.profiling)
}
