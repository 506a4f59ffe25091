package server

import (
	"context"
	"net/http"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// SummaryProvider computes the Summary API's answer; with
// onlyCPUAndMemory, only the CPU and memory of the node, its pods and
// containers. *stats.Provider is one.
type SummaryProvider interface {
	Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error)
}

// getSummary answers /stats/summary; ?only_cpu_and_memory=true asks for
// the cheaper CPU-and-memory summary, as on the kubelet. POST with a form
// body says the same.
func (a *api) getSummary(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, r, errorf(http.StatusBadRequest, "parse form: %w", err))
		return
	}
	only := false
	if v, ok := r.Form["only_cpu_and_memory"]; ok && len(v) == 1 && v[0] == "true" {
		only = true
	}
	summary, err := a.stats.Summary(r.Context(), only)
	if err != nil {
		writeError(w, r, errorf(http.StatusInternalServerError, "Internal Error: %w", err))
		return
	}
	writeJSON(w, r, summary)
}
