package timeline

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// PathPrefix is where the node API serves the timelines:
// <PathPrefix><namespace>/<name>/timeline and .../why.
const PathPrefix = "/debug/pods/"

// Handler serves a pod's timeline and the answer to why it is not
// running, as JSON:
//
//	GET /debug/pods/{namespace}/{name}/timeline  a Timeline
//	GET /debug/pods/{namespace}/{name}/why       a Why
//
// A pod the store does not hold is 404. Authentication and authorization
// are the node API's (nodes/proxy, as the kubelet's other debug paths).
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathPrefix+"{namespace}/{name}/timeline", func(w http.ResponseWriter, r *http.Request) {
		if t, ok := s.lookup(w, r); ok {
			writeJSON(w, t)
		}
	})
	mux.HandleFunc("GET "+PathPrefix+"{namespace}/{name}/why", func(w http.ResponseWriter, r *http.Request) {
		if t, ok := s.lookup(w, r); ok {
			writeJSON(w, Explain(t, s.cfg.Clock.Now()))
		}
	})
	return mux
}

// lookup finds the pod the path names, or answers 404.
func (s *Store) lookup(w http.ResponseWriter, r *http.Request) (Timeline, bool) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	t, ok := s.Get(ns, name)
	if !ok {
		http.Error(w, fmt.Sprintf("no timeline of pod %s/%s on this node", ns, name), http.StatusNotFound)
	}
	return t, ok
}

func writeJSON(w http.ResponseWriter, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}
