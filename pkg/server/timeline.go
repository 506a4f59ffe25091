package server

import (
	"net/http"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

// timelineRoutes serves the pods' timelines (pkg/timeline) with the
// debugging handlers, and answers 405 without them, as the kubelet's
// other debug paths. Like every /debug path they are authorized as
// nodes/proxy (requestAttributes' fallback), so that they are reached
// through the apiserver's node proxy:
// /api/v1/nodes/<node>/proxy/debug/pods/<namespace>/<name>/timeline.
func (a *api) timelineRoutes(mux *http.ServeMux) {
	if a.timeline == nil {
		return
	}
	if !a.debugging {
		mux.HandleFunc(timeline.PathPrefix, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "Debug endpoints are disabled.", http.StatusMethodNotAllowed)
		})
		return
	}
	mux.Handle("GET "+timeline.PathPrefix, a.timeline)
}
