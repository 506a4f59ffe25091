package server

import (
	"net/http"
	"slices"
	"testing"
)

func TestTimelineRoutes(t *testing.T) {
	timeline := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("timeline " + r.URL.Path)) })
	for _, tc := range []struct {
		name      string
		debugging bool
		handler   http.Handler
		code      int
		body      string
	}{
		{"served", true, timeline, http.StatusOK, "timeline /debug/pods/default/web/timeline"},
		{"debugging off", false, timeline, http.StatusMethodNotAllowed, "Debug endpoints are disabled."},
		{"no timeline", true, nil, http.StatusNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := get(t, monitoringAPI(&api{debugging: tc.debugging, timeline: tc.handler}), "/debug/pods/default/web/timeline")
			if rec.Code != tc.code || (tc.body != "" && rec.Body.String() != tc.body && rec.Body.String() != tc.body+"\n") {
				t.Errorf("%d %q, want %d %q", rec.Code, rec.Body, tc.code, tc.body)
			}
		})
	}
}

// The timelines are debug paths: nodes/proxy, as the kubelet's /debug/*.
func TestTimelineAuthorization(t *testing.T) {
	for _, path := range []string{"/debug/pods/default/web/timeline", "/debug/pods/default/web/why"} {
		verb, subs := requestAttributes(http.MethodGet, path)
		if verb != "get" || !slices.Equal(subs, []string{subresourceProxy}) {
			t.Errorf("GET %s: %s %v, want get [proxy]", path, verb, subs)
		}
	}
}
