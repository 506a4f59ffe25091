package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func done(name string, from, to int) timeline.Step {
	return timeline.Step{Name: name, Start: ms(from), End: ms(to), Outcome: timeline.Done, DurationSeconds: float64(to-from) / 1000}
}

// fixedTimeline is a pod whose init container's image is present and
// whose app image pull failed once before it was pulled.
func fixedTimeline() timeline.Timeline {
	pull := done("pullImage:init", 1250, 1250)
	pull.Cached = true
	failed := done("pullImage:app", 1700, 2400)
	failed.Outcome, failed.Error = timeline.Failed, `rpc error: code = Unavailable desc = registry.local: connection refused`
	refresh := done("volumes", 5000, 5004)
	refresh.Repeats = 2
	return timeline.Timeline{
		Pod:       timeline.Pod{Namespace: "default", Name: "web", UID: "6f1c"},
		FirstSeen: t0,
		Steps: []timeline.Step{
			done("admit", 0, 1), done("podCgroup", 2, 12), done("volumes", 12, 212), done("sandbox", 212, 1212),
			pull, done("createContainer:init", 1250, 1300), done("startContainer:init", 1300, 1400),
			failed, done("pullImage:app", 3400, 4000), done("createContainer:app", 4000, 4050),
			done("startContainer:app", 4050, 4150), done("ready", 4600, 4600), refresh,
			{Name: "postStart:app", Start: ms(4150), Outcome: timeline.InProgress, DurationSeconds: 0.85},
		},
		Status: &timeline.Status{Phase: v1.PodRunning, Ready: true},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update to accept):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestWaterfall(t *testing.T) {
	var b bytes.Buffer
	if err := renderWaterfall(&b, fixedTimeline(), "node-1"); err != nil {
		t.Fatal(err)
	}
	golden(t, "waterfall.txt", b.Bytes())
}

func TestWhy(t *testing.T) {
	tl := fixedTimeline()
	tl.Steps = tl.Steps[:8] // up to the failed pull
	tl.Status = &timeline.Status{Phase: v1.PodPending, Waiting: []timeline.Waiting{{Container: "app", Reason: "ErrImagePull", Message: "connection refused"}}}
	var b bytes.Buffer
	if err := renderWhy(&b, timeline.Explain(tl, ms(62400)), "node-1"); err != nil {
		t.Fatal(err)
	}
	golden(t, "why.txt", b.Bytes())
}

func TestHTML(t *testing.T) {
	var b bytes.Buffer
	if err := renderHTML(&b, fixedTimeline(), "node-1"); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, s := range fixedTimeline().Steps {
		if !strings.Contains(page, "<td>"+s.Name+"</td>") {
			t.Errorf("the page lacks step %s", s.Name)
		}
	}
	for _, want := range []string{"<style>", "connection refused", `class="failed"`, "left: 0.000%; width: 0.020%", "node-1"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// Every outcome's bar is drawn in a colour of its own.
	for _, o := range []timeline.Outcome{timeline.Done, timeline.Failed, timeline.InProgress} {
		if !strings.Contains(page, "."+string(o)+" div.bar { background: ") {
			t.Errorf("the page has no colour for the bars of %s steps", o)
		}
	}
	for _, external := range []string{"<script", "<link", "src=", "url(", "ZgotmplZ"} {
		if strings.Contains(page, external) {
			t.Errorf("the page holds %q: not self-contained or badly escaped", external)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr bool
		want    options
	}{
		{args: []string{"timeline", "web", "-n", "prod"}, want: options{command: "timeline", pod: "web", namespace: "prod", explicitNamespace: true}},
		{args: []string{"why", "web", "--kubeconfig", "/k"}, want: options{command: "why", pod: "web", kubeconfig: "/k"}},
		{args: []string{"timeline", "web", "--html", "out.html"}, want: options{command: "timeline", pod: "web", html: "out.html"}},
		{args: []string{"why", "web", "--html", "out.html"}, wantErr: true},
		{args: []string{"explain", "web"}, wantErr: true},
		{args: []string{"why"}, wantErr: true},
	} {
		got, err := parse(tc.args, &bytes.Buffer{})
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("%v: %+v %v, want %+v (error %v)", tc.args, got, err, tc.want, tc.wantErr)
		}
	}
}
