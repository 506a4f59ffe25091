package server

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestParseLogOptions(t *testing.T) {
	now := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		query    string
		check    func(logOptions, bool) bool
		errParam string // the parameter a 400 must name
	}{
		{name: "defaults", query: "", check: func(o logOptions, prev bool) bool {
			return o.tail == -1 && o.limitBytes == -1 && !o.follow && !prev && o.since.IsZero() && o.stdout && o.stderr
		}},
		{name: "all set", query: "follow=true&previous=1&timestamps=true&tailLines=10&limitBytes=100&sinceSeconds=60", check: func(o logOptions, prev bool) bool {
			return o.follow && prev && o.timestamps && o.tail == 10 && o.limitBytes == 100 && o.since.Equal(now.Add(-time.Minute))
		}},
		{name: "sinceTime", query: "sinceTime=2026-01-01T00:30:00Z", check: func(o logOptions, _ bool) bool {
			return o.since.Equal(time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC))
		}},
		{name: "legacy tail", query: "tail=5", check: func(o logOptions, _ bool) bool { return o.tail == 5 }},
		{name: "legacy tail all", query: "tail=all", check: func(o logOptions, _ bool) bool { return o.tail == -1 }},
		{name: "stream", query: "stream=Stderr", check: func(o logOptions, _ bool) bool { return !o.stdout && o.stderr }},
		{name: "bad follow", query: "follow=yes please", errParam: "follow"},
		{name: "bad previous", query: "previous=maybe", errParam: "previous"},
		{name: "negative tail", query: "tailLines=-1", errParam: "tailLines"},
		{name: "text tail", query: "tailLines=ten", errParam: "tailLines"},
		{name: "zero limit", query: "limitBytes=0", errParam: "limitBytes"},
		{name: "zero sinceSeconds", query: "sinceSeconds=0", errParam: "sinceSeconds"},
		{name: "bad sinceTime", query: "sinceTime=yesterday", errParam: "sinceTime"},
		{name: "both since", query: "sinceTime=2026-01-01T00:30:00Z&sinceSeconds=5", errParam: "sinceSeconds"},
		{name: "bad stream", query: "stream=stdin", errParam: "stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tt.query)
			o, prev, err := parseLogOptions(q, now)
			if tt.errParam != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errParam) {
					t.Fatalf("err = %v, want one naming %s", err, tt.errParam)
				}
				if he, ok := err.(*httpError); !ok || he.code != http.StatusBadRequest {
					t.Errorf("err %v is not a 400", err)
				}
				return
			}
			if err != nil || !tt.check(o, prev) {
				t.Errorf("parse(%q) = %+v %v %v", tt.query, o, prev, err)
			}
		})
	}
}

func TestSortNewestFirst(t *testing.T) {
	pod := testPod()
	cs := []*runtimeapi.Container{
		testContainer("a0", pod, "app", "0", runtimeapi.ContainerState_CONTAINER_EXITED, 300),
		testContainer("a2", pod, "app", "2", runtimeapi.ContainerState_CONTAINER_RUNNING, 100),
		testContainer("a1", pod, "app", "1", runtimeapi.ContainerState_CONTAINER_EXITED, 200),
	}
	sortNewestFirst(cs)
	if cs[0].Id != "a2" || cs[1].Id != "a1" || cs[2].Id != "a0" {
		t.Errorf("by restart count: %s %s %s", cs[0].Id, cs[1].Id, cs[2].Id)
	}
	// Without the annotation, creation time decides.
	cs = []*runtimeapi.Container{
		testContainer("old", pod, "app", "", runtimeapi.ContainerState_CONTAINER_EXITED, 100),
		testContainer("new", pod, "app", "", runtimeapi.ContainerState_CONTAINER_RUNNING, 200),
	}
	sortNewestFirst(cs)
	if cs[0].Id != "new" {
		t.Errorf("by creation: %s first", cs[0].Id)
	}
}

// logsFixture is a pod whose app container ran twice (attempt 0 exited,
// attempt 1 running) and whose sidecar was never created.
func logsFixture(t *testing.T) (*fakeRuntime, http.Handler) {
	dir := t.TempDir()
	pod := testPod()
	other := testPod()
	other.UID = "uid-old" // an earlier pod of the same name
	rt := &fakeRuntime{
		containers: []*runtimeapi.Container{
			testContainer("app-0", pod, "app", "0", runtimeapi.ContainerState_CONTAINER_EXITED, 100),
			testContainer("app-1", pod, "app", "1", runtimeapi.ContainerState_CONTAINER_RUNNING, 200),
			testContainer("stale", other, "app", "7", runtimeapi.ContainerState_CONTAINER_EXITED, 50),
			testContainer("init-0", pod, "init", "0", runtimeapi.ContainerState_CONTAINER_EXITED, 10),
		},
		logPaths: map[string]string{
			"app-0":  filepath.Join(dir, "app", "0.log"),
			"app-1":  filepath.Join(dir, "app", "1.log"),
			"stale":  filepath.Join(dir, "stale.log"),
			"init-0": filepath.Join(dir, "init", "0.log"),
		},
	}
	must(t, mkdirWrite(rt.logPaths["app-0"], logLine(1, "stdout", "F", "first run")))
	must(t, mkdirWrite(rt.logPaths["app-1"], logLine(2, "stdout", "F", "second run")+logLine(3, "stderr", "F", "oops")))
	must(t, mkdirWrite(rt.logPaths["stale"], logLine(0, "stdout", "F", "stale pod")))
	must(t, mkdirWrite(rt.logPaths["init-0"], logLine(0, "stdout", "F", "init done")))
	return rt, testAPI(rt, pod).routes()
}

func TestContainerLogsEndpoint(t *testing.T) {
	tests := []struct {
		name   string
		target string
		code   int
		body   string
	}{
		{name: "current attempt", target: "/containerLogs/default/web/app", code: 200, body: "second run\noops\n"},
		{name: "previous attempt", target: "/containerLogs/default/web/app?previous=true", code: 200, body: "first run\n"},
		{name: "tail and timestamps", target: "/containerLogs/default/web/app?tailLines=1&timestamps=true", code: 200, body: "2026-01-01T00:00:03Z oops\n"},
		{name: "init container", target: "/containerLogs/default/web/init", code: 200, body: "init done\n"},
		{name: "no previous", target: "/containerLogs/default/web/init?previous=true", code: 400, body: `previous terminated container "init" in pod "web" not found`},
		{name: "unknown pod", target: "/containerLogs/default/nope/app", code: 404, body: "pod default/nope not found on node node-1"},
		{name: "unknown container", target: "/containerLogs/default/web/db", code: 404, body: `container "db" not found in pod default/web`},
		{name: "not created yet", target: "/containerLogs/default/web/sidecar", code: 400, body: `container "sidecar" in pod "web" is waiting to start: ContainerCreating`},
		{name: "bad query", target: "/containerLogs/default/web/app?tailLines=x", code: 400, body: "invalid tailLines"},
		{name: "odd container name", target: "/containerLogs/default/web/App_1", code: 400, body: "invalid container name"},
		{name: "encoded traversal", target: "/containerLogs/default/web/..%2F..%2Fetc%2Fshadow", code: 400, body: "invalid container name"},
		{name: "odd namespace", target: "/containerLogs/De..fault/web/app", code: 400, body: "invalid namespace"},
	}
	_, h := logsFixture(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.target, nil))
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.body) {
				t.Errorf("GET %s = %d %q, want %d with %q", tt.target, rec.Code, rec.Body.String(), tt.code, tt.body)
			}
		})
	}
}

func TestContainerLogsRelativePathRefused(t *testing.T) {
	pod := testPod()
	rt := &fakeRuntime{
		containers: []*runtimeapi.Container{testContainer("c", pod, "app", "0", runtimeapi.ContainerState_CONTAINER_RUNNING, 1)},
		logPaths:   map[string]string{"c": "../../etc/shadow"},
	}
	rec := httptest.NewRecorder()
	testAPI(rt, pod).routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/containerLogs/default/web/app", nil))
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "no log file") {
		t.Errorf("got %d %q", rec.Code, rec.Body.String())
	}
}

func mkdirWrite(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o600)
}

func TestPickAttempt(t *testing.T) {
	pod := testPod()
	running := testContainer("r", pod, "app", "2", runtimeapi.ContainerState_CONTAINER_RUNNING, 3)
	exited1 := testContainer("e1", pod, "app", "1", runtimeapi.ContainerState_CONTAINER_EXITED, 2)
	exited0 := testContainer("e0", pod, "app", "0", runtimeapi.ContainerState_CONTAINER_EXITED, 1)
	tests := []struct {
		name           string
		attempts       []*runtimeapi.Container
		previous       bool
		latestRestarts bool
		want           string // container ID, or the status code as text
	}{
		{name: "current running", attempts: []*runtimeapi.Container{running, exited1}, want: "r"},
		{name: "previous of running", attempts: []*runtimeapi.Container{running, exited1, exited0}, previous: true, want: "e1"},
		{name: "current in crash loop", attempts: []*runtimeapi.Container{exited1, exited0}, latestRestarts: true, want: "e1"},
		{name: "previous in crash loop is the last crash", attempts: []*runtimeapi.Container{exited1, exited0}, previous: true, latestRestarts: true, want: "e1"},
		{name: "previous of a finished container", attempts: []*runtimeapi.Container{exited1, exited0}, previous: true, want: "e0"},
		{name: "finished once, no previous", attempts: []*runtimeapi.Container{exited0}, previous: true, want: "400"},
		{name: "first run, no previous", attempts: []*runtimeapi.Container{running}, previous: true, want: "400"},
		{name: "never created", want: "400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := pickAttempt(tt.attempts, tt.previous, tt.latestRestarts, pod, "app")
			got := ""
			if err != nil {
				got = strconv.Itoa(err.(*httpError).code)
			} else {
				got = c.Id
			}
			if got != tt.want {
				t.Errorf("pickAttempt = %s (%v), want %s", got, err, tt.want)
			}
		})
	}
}

// TestLogErrorsSpeakAsTheKubelet: kubectl users see the kubelet's words.
func TestLogErrorsSpeakAsTheKubelet(t *testing.T) {
	pod := testPod()
	running := testContainer("r", pod, "app", "0", runtimeapi.ContainerState_CONTAINER_RUNNING, 1)
	if _, err := pickAttempt([]*runtimeapi.Container{running}, true, false, pod, "app"); err == nil ||
		err.Error() != `previous terminated container "app" in pod "web" not found` {
		t.Errorf("previous of a first run: %v", err)
	}
	if _, err := pickAttempt(nil, false, false, pod, "app"); err == nil ||
		err.Error() != `container "app" in pod "web" is waiting to start: ContainerCreating` {
		t.Errorf("never created: %v", err)
	}
	pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull"}}}}
	if _, err := pickAttempt(nil, false, false, pod, "app"); err == nil ||
		err.Error() != `container "app" in pod "web" is waiting to start: ErrImagePull` {
		t.Errorf("never created, image failing: %v", err)
	}
}

func TestWillRestart(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	never := v1.ContainerRestartPolicyNever
	tests := []struct {
		name      string
		policy    v1.RestartPolicy
		container string
		mutate    func(*v1.Pod)
		exitCode  int32
		want      bool
	}{
		{name: "always, success", policy: v1.RestartPolicyAlways, container: "app", want: true},
		{name: "default is always", container: "app", want: true},
		{name: "on failure, failed", policy: v1.RestartPolicyOnFailure, container: "app", exitCode: 1, want: true},
		{name: "on failure, succeeded", policy: v1.RestartPolicyOnFailure, container: "app"},
		{name: "never", policy: v1.RestartPolicyNever, container: "app", exitCode: 1},
		{name: "container policy wins", policy: v1.RestartPolicyAlways, container: "app", exitCode: 1,
			mutate: func(p *v1.Pod) { p.Spec.Containers[0].RestartPolicy = &never }},
		{name: "init failed", policy: v1.RestartPolicyAlways, container: "init", exitCode: 2, want: true},
		{name: "init succeeded", policy: v1.RestartPolicyAlways, container: "init"},
		{name: "init failed, never", policy: v1.RestartPolicyNever, container: "init", exitCode: 2},
		{name: "sidecar", policy: v1.RestartPolicyNever, container: "init", want: true,
			mutate: func(p *v1.Pod) { p.Spec.InitContainers[0].RestartPolicy = &always }},
		{name: "ephemeral, failed: never restarted", policy: v1.RestartPolicyAlways, container: "debugger", exitCode: 1,
			mutate: func(p *v1.Pod) {
				p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger"}}}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.RestartPolicy = tt.policy
			if tt.mutate != nil {
				tt.mutate(pod)
			}
			if got := willRestart(pod, tt.container, tt.exitCode); got != tt.want {
				t.Errorf("willRestart = %v", got)
			}
		})
	}
}

func TestPreviousLogsInCrashLoop(t *testing.T) {
	rt, _ := logsFixture(t)
	pod := testPod()
	// The running attempt 1 crashed and waits for its restart.
	rt.setState("app-1", runtimeapi.ContainerState_CONTAINER_EXITED)
	for _, c := range rt.containers {
		if c.Id == "app-1" {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		}
	}
	rt.exitCodes = map[string]int32{"app-1": 137}
	rec := httptest.NewRecorder()
	testAPI(rt, pod).routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/containerLogs/default/web/app?previous=1", nil))
	if rec.Code != 200 || rec.Body.String() != "second run\noops\n" {
		t.Errorf("got %d %q, want the crashed attempt's log", rec.Code, rec.Body.String())
	}
}

func TestFollowLogsEndWhenContainerExited(t *testing.T) {
	rt, h := logsFixture(t)
	rt.setState("app-1", runtimeapi.ContainerState_CONTAINER_EXITED)
	done := make(chan *httptest.ResponseRecorder)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/containerLogs/default/web/app?follow=true&stream=Stdout", nil))
		done <- rec
	}()
	select {
	case rec := <-done:
		if rec.Code != 200 || rec.Body.String() != "second run\n" {
			t.Errorf("got %d %q", rec.Code, rec.Body.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow of an exited container did not end")
	}
}

func TestContainerLogsMissingDirectory(t *testing.T) {
	pod := testPod()
	rt := &fakeRuntime{
		containers: []*runtimeapi.Container{testContainer("c", pod, "app", "0", runtimeapi.ContainerState_CONTAINER_EXITED, 1)},
		logPaths:   map[string]string{"c": filepath.Join(t.TempDir(), "gone", "0.log")},
	}
	rec := httptest.NewRecorder()
	testAPI(rt, pod).routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/containerLogs/default/web/app", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `read log of container "app"`) {
		t.Errorf("got %d %q", rec.Code, rec.Body.String())
	}
}
