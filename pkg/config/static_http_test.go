package config

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// manifestServer serves the body and status the test sets, and keeps the
// headers of the requests it answered.
type manifestServer struct {
	*httptest.Server

	mu      sync.Mutex
	status  int
	body    string
	headers []http.Header
}

func newManifestServer(t *testing.T) *manifestServer {
	m := &manifestServer{status: http.StatusOK}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.headers = append(m.headers, r.Header.Clone())
		w.WriteHeader(m.status)
		_, _ = w.Write([]byte(m.body))
	}))
	t.Cleanup(m.Close)
	return m
}

// serve sets what the next reads answer.
func (m *manifestServer) serve(status int, body string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.body = status, body
}

func (m *manifestServer) requests() []http.Header {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]http.Header(nil), m.headers...)
}

const (
	webJSON = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}},` +
		`"spec":{"containers":[{"name":"c","image":"busybox:1.37","command":["sleep","3600"]}]}}`
	twoPodsYAML = `apiVersion: v1
kind: PodList
items:
- metadata: {name: a}
  spec: {containers: [{name: c, image: busybox:1.37}]}
- metadata: {name: b, namespace: kube-system}
  spec: {containers: [{name: c, image: busybox:1.37}]}
`
)

func newTestHTTPSource(t *testing.T, srv *manifestServer, rec Recorder) *HTTPSource {
	t.Helper()
	header := http.Header{}
	header.Add("X-Test", "yes")
	header.Add("X-Multi", "one")
	header.Add("X-Multi", "two")
	s, err := NewHTTPSource(HTTPConfig{URL: srv.URL + "/pods", Header: header, NodeName: "n1", Recorder: rec, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func podUIDs(s *HTTPSource) map[string]string {
	out := map[string]string{}
	for _, p := range s.Pods() {
		out[p.Namespace+"/"+p.Name] = string(p.UID)
	}
	return out
}

func TestHTTPSourceSync(t *testing.T) {
	srv := newManifestServer(t)
	rec := &fakeRecorder{}
	s := newTestHTTPSource(t, srv, rec)
	h := &uidRecorder{}
	ctx := context.Background()

	srv.serve(http.StatusInternalServerError, "down")
	s.sync(ctx, h)
	if s.HasSynced() || len(h.ops) != 0 {
		t.Fatalf("a 500 before any good read: synced %v ops %v", s.HasSynced(), h.ops)
	}

	srv.serve(http.StatusOK, webJSON)
	s.sync(ctx, h)
	first := podUIDs(s)
	if !s.HasSynced() || len(first) != 1 || first["default/web-n1"] == "" {
		t.Fatalf("one pod in JSON: synced %v pods %v", s.HasSynced(), first)
	}
	p := s.Pods()[0]
	if p.Annotations[AnnotationSource] != "http" || p.Annotations[AnnotationHash] != string(p.UID) || p.Spec.NodeName != "n1" {
		t.Errorf("annotations %v nodeName %q", p.Annotations, p.Spec.NodeName)
	}
	if _, err := time.Parse(time.RFC3339Nano, p.Annotations[AnnotationSeen]); err != nil {
		t.Errorf("seen: %v", err)
	}
	fromFile, err := decodeStaticPod("/etc/kubernetes/manifests/web.json", []byte(webJSON), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if fromFile.UID == p.UID {
		t.Errorf("the same pod from a file and from the URL share the UID %s", p.UID)
	}
	reqs := srv.requests()
	if len(reqs) != 2 || reqs[1].Get("X-Test") != "yes" || strings.Join(reqs[1].Values("X-Multi"), ",") != "one,two" {
		t.Errorf("requests' headers: %v", reqs)
	}

	h.ops = nil
	s.sync(ctx, h) // the same body: the same pod, nothing handed over
	if got := podUIDs(s); len(h.ops) != 0 || got["default/web-n1"] != first["default/web-n1"] {
		t.Errorf("an unchanged body gave ops %v pods %v (before %v)", h.ops, got, first)
	}

	for _, bad := range []struct {
		status int
		body   string
	}{{http.StatusInternalServerError, ""}, {http.StatusNotFound, webJSON}} {
		srv.serve(bad.status, bad.body)
		s.sync(ctx, h)
		if got := podUIDs(s); len(h.ops) != 0 || got["default/web-n1"] != first["default/web-n1"] {
			t.Errorf("status %d changed the pods: ops %v pods %v", bad.status, h.ops, got)
		}
	}
	if len(rec.events) != 0 {
		t.Errorf("a failed read recorded events: %v", rec.events)
	}

	srv.serve(http.StatusOK, "apiVersion: v1\nkind: Pod\nmetadata: {name: web\n")
	s.sync(ctx, h)
	s.sync(ctx, h) // reported once, not at every read
	if got := podUIDs(s); len(h.ops) != 0 || got["default/web-n1"] != first["default/web-n1"] {
		t.Errorf("an invalid body changed the pods: ops %v pods %v", h.ops, got)
	}
	if len(rec.events) != 1 || !strings.HasPrefix(rec.events[0], "FailedValidation: Could not process manifest URL "+srv.URL+"/pods") ||
		rec.kinds[0] != "Node/n1" {
		t.Errorf("events for an invalid body: %v on %v", rec.events, rec.kinds)
	}

	srv.serve(http.StatusOK, strings.Replace(webJSON, "3600", "3601", 1))
	s.sync(ctx, h)
	changed := podUIDs(s)["default/web-n1"]
	want := []string{"-web-n1/" + first["default/web-n1"], "+web-n1/" + changed}
	if changed == first["default/web-n1"] || strings.Join(h.ops, " ") != strings.Join(want, " ") {
		t.Errorf("ops = %v, want the old pod removed before the new one comes: %v", h.ops, want)
	}

	h.ops = nil
	srv.serve(http.StatusOK, twoPodsYAML)
	s.sync(ctx, h)
	two := podUIDs(s)
	if len(two) != 2 || two["default/a-n1"] == "" || two["kube-system/b-n1"] == "" || len(h.ops) != 3 {
		t.Errorf("a PodList of two: pods %v ops %v", two, h.ops)
	}

	h.ops = nil
	srv.serve(http.StatusOK, "")
	s.sync(ctx, h)
	if len(s.Pods()) != 0 || len(h.ops) != 2 || !strings.HasPrefix(h.ops[0], "-") || !strings.HasPrefix(h.ops[1], "-") {
		t.Errorf("an empty body: pods %v ops %v", podUIDs(s), h.ops)
	}

	h.ops = nil
	srv.Close() // no answer at all
	s.sync(ctx, h)
	if s.failures != 1 || len(h.ops) != 0 {
		t.Errorf("an unreachable server: failures %d ops %v", s.failures, h.ops)
	}
}

func TestHTTPSourceEmptyBodySyncs(t *testing.T) {
	srv := newManifestServer(t)
	s := newTestHTTPSource(t, srv, nil)
	h := &uidRecorder{}
	srv.serve(http.StatusOK, "")
	s.sync(context.Background(), h)
	if !s.HasSynced() || len(s.Pods()) != 0 || len(h.ops) != 0 {
		t.Errorf("an empty body first: synced %v pods %d ops %v", s.HasSynced(), len(s.Pods()), h.ops)
	}
}

func TestHTTPSourceKeepsTheFirstOfDuplicates(t *testing.T) {
	srv := newManifestServer(t)
	rec := &fakeRecorder{}
	s := newTestHTTPSource(t, srv, rec)
	h := &uidRecorder{}
	srv.serve(http.StatusOK, twoPodsYAML+"- metadata: {name: a}\n  spec: {containers: [{name: c, image: busybox:1.37, command: [sh]}]}\n")
	s.sync(context.Background(), h)
	pods := s.Pods()
	if len(pods) != 2 || pods[0].Name != "a-n1" || len(pods[0].Spec.Containers[0].Command) != 0 {
		t.Fatalf("pods %v", podUIDs(s))
	}
	if len(rec.events) != 1 || !strings.Contains(rec.events[0], "pod default/a-n1 is defined more than once") {
		t.Errorf("events: %v", rec.events)
	}
}

func TestDecodeURLPods(t *testing.T) {
	url := "http://10.0.0.1/pods"
	pods, err := decodeURLPods(url, []byte(webJSON), "n1")
	if err != nil {
		t.Fatal(err)
	}
	// The same pod alone and in a list is the same pod.
	list := `{"apiVersion":"v1","kind":"PodList","items":[` + strings.Replace(webJSON, `"apiVersion":"v1","kind":"Pod",`, "", 1) + `]}`
	inList, err := decodeURLPods(url, []byte(list), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || len(inList) != 1 || pods[0].UID != inList[0].UID {
		t.Errorf("alone %v, in a list %v", pods, inList)
	}
	other, err := decodeURLPods("http://10.0.0.2/pods", []byte(webJSON), "n1")
	if err != nil || other[0].UID == pods[0].UID {
		t.Errorf("another URL gives the UID %v (%v)", other, err)
	}

	tests := []struct{ name, doc, want string }{
		{name: "not YAML", doc: "a: [b", want: "not valid YAML"},
		{name: "a service", doc: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", want: "not a v1 Pod or PodList"},
		{name: "a generic list", doc: "apiVersion: v1\nkind: List\nitems: []\n", want: "not a v1 Pod or PodList"},
		{name: "an invalid pod", doc: "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\n", want: "at least one container"},
		{name: "an invalid item", doc: twoPodsYAML + "- metadata: {name: c}\n  spec: {containers: [{name: c}]}\n", want: "items[2]: invalid pod"},
		{name: "an item without name", doc: "apiVersion: v1\nkind: PodList\nitems: [{spec: {containers: [{name: c, image: i}]}}]\n",
			want: "items[0]: invalid pod: metadata.name is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeURLPods(url, []byte(tt.doc), "n1")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestNewHTTPSourceRefuses(t *testing.T) {
	for _, u := range []string{"", "/etc/kubernetes/pods.yaml", "file:///etc/pods.yaml", "http://", "ht tp://x"} {
		if _, err := NewHTTPSource(HTTPConfig{URL: u, NodeName: "n1"}); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
	if _, err := NewHTTPSource(HTTPConfig{URL: "http://x/pods"}); err == nil {
		t.Error("no NodeName accepted")
	}
}

// Run reads at once, then at every tick of the clock.
func TestHTTPSourceRunReadsEveryPeriod(t *testing.T) {
	srv := newManifestServer(t)
	srv.serve(http.StatusOK, strings.Replace(webJSON, `"labels":{"app":"web"}`, `"labels":{"v":"1"}`, 1))
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 25, 7, 0, 0, 0, time.UTC))
	s, err := NewHTTPSource(HTTPConfig{URL: srv.URL, NodeName: "n1", Period: time.Minute, Clock: clk, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	h := newRecordingHandler()
	if err := s.SetHandler(h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	if e := h.next(t); e.op != "upsert" || e.name != "web-n1" || e.version != "1" {
		t.Errorf("first read: %+v", e)
	}
	// The source says it synced once it has handed the first read over:
	// just after the handler got it.
	for deadline := time.Now().Add(5 * time.Second); !s.HasSynced(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("not synced after the first read")
		}
	}
	if err := s.Run(ctx); err == nil {
		t.Error("Run twice")
	}

	srv.serve(http.StatusOK, strings.Replace(webJSON, `"labels":{"app":"web"}`, `"labels":{"v":"2"}`, 1))
	for !clk.HasWaiters() { // the ticker is made after the first read
		runtime.Gosched()
	}
	clk.Step(time.Minute)
	if e := h.next(t); e.op != "remove" || e.version != "1" {
		t.Errorf("after a tick: %+v", e)
	}
	if e := h.next(t); e.op != "upsert" || e.version != "2" {
		t.Errorf("after a tick: %+v", e)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	h.none(t)
}
