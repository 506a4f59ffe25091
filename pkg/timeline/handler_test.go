package timeline

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func TestHandler(t *testing.T) {
	s, clk := newStore(t, Config{})
	s.Record(web, Step{Name: "admit", Start: t0, End: t0.Add(time.Millisecond)})
	step(s, web, "sandbox", t0.Add(time.Millisecond), time.Second, nil)
	step(s, web, "pullImage:app", at(2), time.Second, errors.New("not found"))
	s.ObserveStatus(web, &v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{
		{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}}}}, at(3))
	clk.SetTime(at(12))
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}

	resp, body := get("/debug/pods/default/web/timeline")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("timeline: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"namespace", "name", "uid", "firstSeen", "steps", "status"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("timeline JSON lacks %q: %s", k, body)
		}
	}
	var tl Timeline
	if err := json.Unmarshal(body, &tl); err != nil {
		t.Fatal(err)
	}
	if len(tl.Steps) != 3 || tl.Steps[2].Outcome != Failed || tl.Steps[2].Error != "not found" || tl.Steps[1].DurationSeconds != 1 {
		t.Errorf("timeline steps %+v", tl.Steps)
	}
	if strings.Contains(string(body), `"end":"0001`) {
		t.Errorf("zero times are shown: %s", body)
	}

	resp, body = get("/debug/pods/default/web/why")
	var why Why
	if err := json.Unmarshal(body, &why); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("why: %d %v %s", resp.StatusCode, err, body)
	}
	if why.Step != "pullImage:app" || why.State != Failed || why.Error != "not found" || why.ForSeconds != 10 ||
		len(why.Waiting) != 1 || why.Waiting[0].Reason != "ErrImagePull" {
		t.Errorf("why %+v", why)
	}

	for _, path := range []string{"/debug/pods/default/other/why", "/debug/pods/default/other/timeline"} {
		if resp, _ := get(path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, resp.StatusCode)
		}
	}
	if resp, err := http.Post(srv.URL+"/debug/pods/default/web/why", "text/plain", nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %v %v, want 405", resp.StatusCode, err)
	}
}
