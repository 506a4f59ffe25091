package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseCRILogLine(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	tests := []struct {
		name    string
		line    string
		want    logEntry
		wantErr bool
	}{
		{name: "full line", line: "2026-01-02T03:04:05.0000006Z stdout F hello world", want: logEntry{ts: ts, stream: "stdout", content: []byte("hello world")}},
		{name: "partial", line: "2026-01-02T03:04:05.0000006Z stderr P part", want: logEntry{ts: ts, stream: "stderr", partial: true, content: []byte("part")}},
		{name: "extra tags", line: "2026-01-02T03:04:05.0000006Z stdout P:x part", want: logEntry{ts: ts, stream: "stdout", partial: true, content: []byte("part")}},
		{name: "empty content", line: "2026-01-02T03:04:05.0000006Z stdout F", want: logEntry{ts: ts, stream: "stdout"}},
		{name: "spaces kept", line: "2026-01-02T03:04:05.0000006Z stdout F  two  spaces ", want: logEntry{ts: ts, stream: "stdout", content: []byte(" two  spaces ")}},
		{name: "bad time", line: "yesterday stdout F x", wantErr: true},
		{name: "bad stream", line: "2026-01-02T03:04:05Z stdin F x", wantErr: true},
		{name: "no tags", line: "2026-01-02T03:04:05Z stdout", wantErr: true},
		{name: "empty", line: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCRILogLine([]byte(tt.line))
			if tt.wantErr {
				if !errors.Is(err, errBadLogLine) {
					t.Fatalf("err = %v, want errBadLogLine", err)
				}
				return
			}
			if err != nil || !got.ts.Equal(tt.want.ts) || got.stream != tt.want.stream || got.partial != tt.want.partial || !bytes.Equal(got.content, tt.want.content) {
				t.Errorf("parse = %+v %v, want %+v", got, err, tt.want)
			}
		})
	}
}

// logLine is a CRI log line at second sec of 2026-01-01 UTC.
func logLine(sec int, stream, tag, msg string) string {
	return time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC).Format(time.RFC3339Nano) + " " + stream + " " + tag + " " + msg + "\n"
}

const sampleLog = "" +
	"2026-01-01T00:00:01Z stdout F one\n" +
	"2026-01-01T00:00:02Z stderr F two\n" +
	"garbage that is not a log line\n" +
	"2026-01-01T00:00:03Z stdout P thr\n" +
	"2026-01-01T00:00:04Z stdout P e\n" +
	"2026-01-01T00:00:05Z stdout F e\n" +
	"2026-01-01T00:00:06.5Z stdout F four\n"

func baseOptions() logOptions {
	return logOptions{tail: -1, limitBytes: -1, stdout: true, stderr: true}
}

func readLog(t *testing.T, path string, opts logOptions) string {
	t.Helper()
	var out bytes.Buffer
	lr := &logReader{opts: opts}
	if err := lr.read(context.Background(), path, &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestReadLogOptions(t *testing.T) {
	path := writeTemp(t, "0.log", []byte(sampleLog))
	at := func(sec int) time.Time { return time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC) }
	tests := []struct {
		name   string
		mutate func(*logOptions)
		want   string
	}{
		{name: "all, partials joined, garbage skipped", want: "one\ntwo\nthree\nfour\n"},
		{name: "tail 2 counts joined lines", mutate: func(o *logOptions) { o.tail = 2 }, want: "three\nfour\n"},
		{name: "tail 0", mutate: func(o *logOptions) { o.tail = 0 }, want: ""},
		{name: "tail beyond the log", mutate: func(o *logOptions) { o.tail = 100 }, want: "one\ntwo\nthree\nfour\n"},
		{name: "limit cuts mid line", mutate: func(o *logOptions) { o.limitBytes = 6 }, want: "one\ntw"},
		{name: "tail then limit", mutate: func(o *logOptions) { o.tail = 1; o.limitBytes = 2 }, want: "fo"},
		{name: "since is inclusive", mutate: func(o *logOptions) { o.since = at(2) }, want: "two\nthree\nfour\n"},
		{name: "since judges a joined line by its first part", mutate: func(o *logOptions) { o.since = at(4) }, want: "four\n"},
		{name: "since and tail", mutate: func(o *logOptions) { o.since = at(2); o.tail = 2 }, want: "three\nfour\n"},
		{name: "stdout only", mutate: func(o *logOptions) { o.stderr = false }, want: "one\nthree\nfour\n"},
		{name: "stderr only", mutate: func(o *logOptions) { o.stdout = false }, want: "two\n"},
		{name: "stdout tail 1", mutate: func(o *logOptions) { o.stderr = false; o.tail = 1 }, want: "four\n"},
		{name: "timestamps once per line", mutate: func(o *logOptions) { o.timestamps = true; o.since = at(3) },
			want: "2026-01-01T00:00:03Z three\n2026-01-01T00:00:06.5Z four\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := baseOptions()
			if tt.mutate != nil {
				tt.mutate(&opts)
			}
			if got := readLog(t, path, opts); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func writeGzip(t *testing.T, path, content string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(content))
	_ = zw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReadLogAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "1.log")
	writeGzip(t, path+".20260101-000001.gz", logLine(1, "stdout", "F", "a")+logLine(2, "stdout", "F", "b"))
	must(t, os.WriteFile(path+".20260101-000003", []byte(logLine(3, "stdout", "P", "c")+logLine(4, "stdout", "F", "c")), 0o600))
	must(t, os.WriteFile(path, []byte(logLine(5, "stdout", "F", "d")), 0o600))
	// Not part of this log: other attempts, temporary and odd names.
	must(t, os.WriteFile(filepath.Join(dir, "0.log.20260101-000000"), []byte(logLine(0, "stdout", "F", "other")), 0o600))
	must(t, os.WriteFile(path+".tmp", []byte(logLine(0, "stdout", "F", "tmp")), 0o600))
	must(t, os.WriteFile(path+".20260101-000009.gz.tmp", []byte("x"), 0o600))
	must(t, os.Mkdir(path+".20260101-000008", 0o755))

	files, err := logFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{path + ".20260101-000001.gz", path + ".20260101-000003", path}
	if strings.Join(files, ",") != strings.Join(want, ",") {
		t.Fatalf("logFiles = %v, want %v", files, want)
	}
	if got := readLog(t, path, baseOptions()); got != "a\nb\ncc\nd\n" {
		t.Errorf("all = %q", got)
	}
	opts := baseOptions()
	opts.tail = 3
	if got := readLog(t, path, opts); got != "b\ncc\nd\n" {
		t.Errorf("tail 3 = %q", got)
	}
}

func TestLogFilesPrefersPlainTwinOfGzip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	for _, n := range []string{path, path + ".20260101-000001", path + ".20260101-000001.gz"} {
		must(t, os.WriteFile(n, nil, 0o600))
	}
	files, err := logFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0] != path+".20260101-000001" {
		t.Errorf("logFiles = %v", files)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a buffer written by the reader and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	must(t, err)
	_, err = f.WriteString(s)
	must(t, err)
	must(t, f.Close())
}

func TestFollowLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	appendTo(t, path, logLine(1, "stdout", "F", "old")+logLine(2, "stdout", "F", "last"))
	var running atomic.Bool
	running.Store(true)
	var out syncBuffer
	opts := baseOptions()
	opts.follow, opts.tail = true, 1
	lr := &logReader{
		opts:           opts,
		running:        func(context.Context) bool { return running.Load() },
		pollInterval:   5 * time.Millisecond,
		statusInterval: 5 * time.Millisecond,
	}
	done := make(chan error, 1)
	go func() { done <- lr.read(context.Background(), path, &out) }()

	waitFor(t, "the tail", func() bool { return out.String() == "last\n" })
	// A line written in two goes shows once complete.
	appendTo(t, path, strings.TrimSuffix(logLine(3, "stdout", "F", "new"), "\n"))
	time.Sleep(20 * time.Millisecond)
	if got := out.String(); got != "last\n" {
		t.Fatalf("incomplete line shown: %q", got)
	}
	appendTo(t, path, "\n")
	waitFor(t, "an appended line", func() bool { return out.String() == "last\nnew\n" })

	// Rotation: the runtime's last writes to the old file, then a new file.
	must(t, os.Rename(path, path+".20260101-000004"))
	appendTo(t, path+".20260101-000004", logLine(4, "stdout", "F", "late"))
	appendTo(t, path, logLine(5, "stderr", "F", "rotated"))
	waitFor(t, "the rotated file", func() bool { return out.String() == "last\nnew\nlate\nrotated\n" })

	appendTo(t, path, logLine(6, "stdout", "F", "final"))
	running.Store(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end when the container stopped")
	}
	if got := out.String(); got != "last\nnew\nlate\nrotated\nfinal\n" {
		t.Errorf("output %q", got)
	}
}

func TestFollowEndsWithRequest(t *testing.T) {
	path := writeTemp(t, "0.log", []byte(logLine(1, "stdout", "F", "x")))
	opts := baseOptions()
	opts.follow = true
	lr := &logReader{opts: opts, running: func(context.Context) bool { return true }, pollInterval: 5 * time.Millisecond, statusInterval: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out syncBuffer
	go func() { done <- lr.read(ctx, path, &out) }()
	waitFor(t, "the log", func() bool { return out.String() == "x\n" })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end with its context")
	}
}

func TestLongLineIsBounded(t *testing.T) {
	long := strings.Repeat("x", maxLogLineSize+100)
	path := writeTemp(t, "0.log", []byte("2026-01-01T00:00:01Z stdout F "+long+"\n"+logLine(2, "stdout", "F", "next")))
	got := readLog(t, path, baseOptions())
	if !strings.HasSuffix(got, "next\n") || len(got) > maxLogLineSize+10 {
		t.Errorf("got %d bytes ending %q", len(got), got[len(got)-10:])
	}
}
