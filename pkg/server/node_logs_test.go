package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// logDir is a node log directory: syslog, kubelet.log, a service's
// directory and a link out of the directory.
func logDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"syslog":                    "line 1\nline 2\n",
		"kubelet.log":               "kubelet says hi\n",
		"containerd/containerd.log": "containerd says hi\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestNodeLogs(t *testing.T) {
	dir := logDir(t)
	tests := []struct {
		name     string
		handler  bool
		query    bool
		method   string
		path     string
		code     int
		contains string
	}{
		{name: "a file", handler: true, path: "/logs/syslog", code: 200, contains: "line 1\nline 2\n"},
		{name: "a file below a directory", handler: true, path: "/logs/containerd/containerd.log", code: 200, contains: "containerd says hi"},
		{name: "the listing", handler: true, path: "/logs/", code: 200, contains: `<a href="containerd/">containerd/</a>`},
		{name: "a directory without its slash is listed, not redirected", handler: true, path: "/logs/containerd", code: 200, contains: `<a href="containerd/containerd.log">`},
		{name: "missing", handler: true, path: "/logs/nothing", code: 404},
		{name: "no way out through a link", handler: true, path: "/logs/escape", code: 404},
		{name: "only GET", handler: true, method: http.MethodPost, path: "/logs/syslog", code: 405},
		{name: "handler off", path: "/logs/syslog", code: 405, contains: "logs endpoint is disabled."},
		{name: "query ignored without enableSystemLogQuery", handler: true, path: "/logs/?query=kubelet", code: 200, contains: `<a href="kubelet.log">`},
		{name: "query a file", handler: true, query: true, path: "/logs/?query=/kubelet.log", code: 200, contains: "kubelet says hi"},
		{name: "query a file below a directory", handler: true, query: true, path: "/logs/?query=containerd/containerd.log", code: 200, contains: "containerd says hi"},
		{name: "query a service without a journal: its file", handler: true, query: true, path: "/logs/?query=kubelet", code: 200, contains: "kubelet says hi"},
		{name: "query a service in its directory", handler: true, query: true, path: "/logs/?query=containerd", code: 200, contains: "containerd says hi"},
		{name: "query a service with no log", handler: true, query: true, path: "/logs/?query=sshd", code: 200, contains: "log not found for sshd"},
		{name: "options on a service's file", handler: true, query: true, path: "/logs/?query=kubelet&tailLines=5", code: 200,
			contains: "options present and query resolved to log files for [kubelet]"},
		{name: "files without a query still served", handler: true, query: true, path: "/logs/syslog", code: 200, contains: "line 1"},
		{name: "blank query", handler: true, query: true, path: "/logs/?query=%20", code: 400, contains: "query: Invalid value: [\" \"]: may not be empty"},
		{name: "bad sinceTime", handler: true, query: true, path: "/logs/?query=kubelet&sinceTime=yesterday", code: 400, contains: `sinceTime: Invalid value: "yesterday": invalid time format`},
		{name: "bad tailLines", handler: true, query: true, path: "/logs/?query=kubelet&tailLines=x", code: 400, contains: "tailLines: Invalid value"},
		{name: "path in query mode", handler: true, query: true, path: "/logs/syslog?query=kubelet", code: 406, contains: "path not allowed in query mode"},
		{name: "file with options", handler: true, query: true, path: "/logs/?query=/syslog&tailLines=1", code: 406, contains: "cannot specify file with options"},
		{name: "two files", handler: true, query: true, path: "/logs/?query=/syslog&query=/kubelet.log", code: 406, contains: "cannot specify more than one file"},
		{name: "file and service", handler: true, query: true, path: "/logs/?query=/syslog&query=kubelet", code: 406, contains: "cannot specify a file and service"},
		{name: "missing file", handler: true, query: true, path: "/logs/?query=/nothing.log", code: 406, contains: "query: Invalid value"},
		{name: "file outside", handler: true, query: true, path: "/logs/?query=x/../../etc/passwd", code: 406, contains: "query: Invalid value"},
		{name: "unsafe service", handler: true, query: true, path: "/logs/?query=kubelet%3Brm", code: 406, contains: "input contains unsupported characters"},
		{name: "too many services", handler: true, query: true, path: "/logs/?query=a&query=b&query=c&query=d&query=e", code: 406, contains: "Too many: 5: must have at most 4 items"},
		{name: "options alone", handler: true, query: true, path: "/logs/?tailLines=5", code: 406, contains: "query: Required value: cannot be empty with options"},
		{name: "boot in the future", handler: true, query: true, path: "/logs/?query=kubelet&boot=1", code: 406, contains: "boot: Invalid value: 1: must be less than 1"},
		{name: "tailLines too many", handler: true, query: true, path: "/logs/?query=kubelet&tailLines=100001", code: 406, contains: "tailLines: Invalid value: 100001"},
		{name: "until before since", handler: true, query: true, path: "/logs/?query=kubelet&sinceTime=2026-01-02T00:00:00Z&untilTime=2026-01-01T00:00:00Z", code: 406, contains: "must be after `sinceTime`"},
		{name: "bad pattern", handler: true, query: true, path: "/logs/?query=kubelet&pattern=(", code: 406, contains: "pattern: Invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := testAPI(&fakeRuntime{})
			if tt.handler {
				a.nodeLogs = &nodeLogs{dir: dir, query: tt.query, journalctl: filepath.Join(t.TempDir(), "no-journalctl")}
			}
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			rec := httptest.NewRecorder()
			a.routes().ServeHTTP(rec, httptest.NewRequest(method, tt.path, nil))
			if rec.Code != tt.code {
				t.Fatalf("%s %s: %d %q, want %d", method, tt.path, rec.Code, rec.Body, tt.code)
			}
			if !strings.Contains(rec.Body.String(), tt.contains) {
				t.Errorf("body %q, want it to hold %q", rec.Body, tt.contains)
			}
			if strings.Contains(rec.Body.String(), "secret") {
				t.Errorf("a file outside the log directory was served: %q", rec.Body)
			}
		})
	}
}

// A service the journal knows is read with journalctl, with the
// options turned into its flags.
func TestNodeLogQueryJournal(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "journalctl")
	script := "#!/bin/sh\nif [ \"$1\" = --field ]; then echo kubelet.service; exit 0; fi\necho \"$@\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	a := testAPI(&fakeRuntime{})
	a.nodeLogs = &nodeLogs{dir: logDir(t), query: true, journalctl: bin}
	rec := httptest.NewRecorder()
	a.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet,
		"/logs/?query=kubelet&sinceTime=2026-01-02T03:04:05Z&tailLines=10&pattern=err&boot=-1", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	want := "--utc --no-pager --output=short-precise --since=2026-1-2 03:4:5 --pager-end --lines=10 --unit=kubelet --grep=err --boot -1\n"
	if rec.Body.String() != want {
		t.Errorf("journalctl got %q, want %q", rec.Body, want)
	}
}
