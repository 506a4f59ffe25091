package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// logLines collects what a Config logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// progressFixture is a build progress on a fake clock with its goroutine not running: the
// test calls beat and end itself.
func progressFixture(quiet bool, items ...string) (*buildProgress, *logLines, *fakeClock, *buildRecord) {
	logs := &logLines{}
	clock := &fakeClock{t: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)}
	rec := &buildRecord{}
	c := &Config{Logf: logs.logf, record: rec}
	p := c.newBuildProgress("upstream v1.37.1", items, quiet)
	p.now = clock.now
	p.start, p.lastSaid = clock.now(), clock.now()
	return p, logs, clock, rec
}

func TestBuildProgressLoud(t *testing.T) {
	p, logs, clock, rec := progressFixture(false, "etcd", "kube-apiserver", "kubectl")
	p.about = "about 12 minutes on 2 cores"
	p.announce()
	p.setPhase("downloading modules")
	clock.advance(20 * time.Second)
	p.beat() // nothing said for 20s only: quiet
	clock.advance(15 * time.Second)
	p.beat()
	p.setPhase("")
	p.expect(100)
	for i := 0; i < 40; i++ {
		p.compiling(fmt.Sprintf("k8s.io/pkg%d", i))
	}
	clock.advance(30 * time.Second)
	p.beat()
	clock.advance(10 * time.Second)
	p.built("kubectl")
	p.built("kubectl") // a binary is reported once
	clock.advance(25 * time.Second)
	p.beat() // 25s after the last line: quiet
	for i := 40; i < 100; i++ {
		p.compiling(fmt.Sprintf("k8s.io/pkg%d", i))
	}
	clock.advance(5 * time.Second)
	p.beat()
	clock.advance(30 * time.Second)
	p.end(nil)
	want := []string{
		"upstream v1.37.1: building 3 binaries (etcd, kube-apiserver, kubectl), about 12 minutes on 2 cores, once: later runs take them from the cache",
		"upstream v1.37.1: downloading modules (35s so far)",
		"upstream v1.37.1: 100 packages to compile",
		"upstream v1.37.1: 40/100 packages compiled, 0/3 binaries built (1m5s so far)",
		"upstream v1.37.1: [1/3] kubectl built (1m15s so far)",
		"upstream v1.37.1: 100 packages compiled, 1/3 binaries built (1m45s so far)",
		"upstream v1.37.1: [2/3] etcd built (2m15s so far)",
		"upstream v1.37.1: [3/3] kube-apiserver built (2m15s so far)",
		"upstream v1.37.1: built in 2m15s (100 packages compiled)",
	}
	if got := logs.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantRec := []recordEntry{{name: "upstream v1.37.1", took: 135 * time.Second,
		built: []builtThing{{what: "etcd, kube-apiserver, kubectl", took: 135 * time.Second}}}}
	if got := rec.take(); !reflect.DeepEqual(got, wantRec) {
		t.Errorf("record: %+v, want %+v", got, wantRec)
	}
}

func TestBuildProgressFailedBuildIsNotNoted(t *testing.T) {
	p, logs, clock, rec := progressFixture(false, "csi-provisioner")
	p.announce()
	p.compiling("a")
	clock.advance(time.Minute)
	p.end(fmt.Errorf("boom"))
	p.beat()
	want := []string{"upstream v1.37.1: building, once: later runs take it from the cache"}
	if got := logs.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("lines: %q, want %q", got, want)
	}
	if got := rec.take(); got != nil {
		t.Errorf("record: %+v, want nothing", got)
	}
}

func TestBuildProgressQuiet(t *testing.T) {
	for _, tc := range []struct {
		name     string
		compiled int
		want     []string
		noted    bool
	}{
		{name: "cached: a link only", compiled: 0},
		{name: "compiled", compiled: 3, noted: true, want: []string{
			"upstream v1.37.1: compiling (changed sources, or not yet in the Go build cache)",
			"upstream v1.37.1: 3/50 packages compiled (40s so far)",
			"upstream v1.37.1: built in 45s (3 packages compiled)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, logs, clock, rec := progressFixture(true, "nodeagent")
			p.expect(50) // a quiet build never says what it expects
			for i := 0; i < tc.compiled; i++ {
				p.compiling("pkg")
			}
			clock.advance(40 * time.Second)
			p.beat()
			clock.advance(5 * time.Second)
			p.end(nil)
			if got := logs.take(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if got := rec.take(); (got != nil) != tc.noted {
				t.Errorf("record: %+v, want noted=%v", got, tc.noted)
			}
		})
	}
}

func TestBuildOutputSplitsPackagesFromTheRest(t *testing.T) {
	p, _, _, _ := progressFixture(true)
	w := &buildOutput{p: p}
	for _, chunk := range []string{"k8s.io/api/co", "re/v1\ngo: downloading x v1.0.0\n", "runtime\n# k8s.io/x\n./a.go:3:2: undefined: y\nvendor/z"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	w.flush()
	if p.compiled != 3 {
		t.Errorf("compiled %d packages, want 3 (k8s.io/api/core/v1, runtime, vendor/z)", p.compiled)
	}
	if got, want := w.other.String(), "go: downloading x v1.0.0\n# k8s.io/x\n./a.go:3:2: undefined: y\n"; got != want {
		t.Errorf("other output %q, want %q", got, want)
	}
}

func TestIsPackageLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"k8s.io/kubernetes/cmd/kubelet", true},
		{"internal/abi", true},
		{"command-line-arguments", true},
		{"", false},
		{"# k8s.io/kubernetes/pkg/x", false},
		{"pkg/x/a.go:12:3: undefined: y", false},
		{"go: downloading k8s.io/api v0.37.1", false},
		{"\tnote", false},
	} {
		if got := isPackageLine(tc.line); got != tc.want {
			t.Errorf("isPackageLine(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}

func TestGoBinaryName(t *testing.T) {
	for pkg, want := range map[string]string{
		"go.etcd.io/etcd/server/v3":            "server",
		"k8s.io/kubernetes/cmd/kube-apiserver": "kube-apiserver",
		"github.com/onsi/ginkgo/v2/ginkgo":     "ginkgo",
		"example.com/v":                        "v",
	} {
		if got := goBinaryName(pkg); got != want {
			t.Errorf("goBinaryName(%q) = %q, want %q", pkg, got, want)
		}
	}
}

func TestSummaryLines(t *testing.T) {
	step := func(name string, took time.Duration, built ...builtThing) recordEntry {
		return recordEntry{name: name, took: took, built: built}
	}
	for _, tc := range []struct {
		name    string
		entries []recordEntry
		total   time.Duration
		want    []string
	}{
		{name: "all cached: nothing", total: 9 * time.Second, entries: []recordEntry{
			step("install packages", 10*time.Millisecond), step("upstream binaries", 20*time.Millisecond),
			step("images pushed", 3*time.Second),
		}},
		{name: "a first run", total: 20 * time.Minute, entries: []recordEntry{
			step("install packages", 63*time.Second),
			step("node network", 200*time.Millisecond),
			step("cgroup root", 10*time.Millisecond),
			step("upstream binaries", 12*time.Minute, builtThing{"etcd, kube-apiserver", 12 * time.Minute}),
			step("images pushed", 5*time.Minute+2*time.Second,
				builtThing{"csi-provisioner", 2*time.Minute + 38*time.Second}, builtThing{"csi-attacher", 2*time.Minute + 19*time.Second}),
			step("containerd", 150*time.Second, builtThing{"containerd, ctr", 148 * time.Second}),
			step("etcd", 1500*time.Millisecond),
		}, want: []string{
			"summary: 20m0s in all, 19m25s of it building what later runs take from the cache",
			"  install packages      1m3s",
			"  upstream binaries    12m0s  built etcd, kube-apiserver in 12m0s",
			"  images pushed         5m2s  built csi-provisioner in 2m38s; csi-attacher in 2m19s",
			"  containerd           2m30s  built containerd, ctr in 2m28s",
			"  etcd                  1.5s",
			"  2 more steps         200ms",
			"  total                20m0s",
		}},
		{name: "builds outside steps", total: 3 * time.Minute, entries: []recordEntry{
			step("conformance suite v1.37.1", 170*time.Second, builtThing{"e2e.test, ginkgo", 170 * time.Second}),
		}, want: []string{
			"summary: 3m0s in all, 2m50s of it building what later runs take from the cache",
			"  conformance suite v1.37.1    2m50s  built e2e.test, ginkgo in 2m50s",
			"  total                         3m0s",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := summaryLines(tc.entries, tc.total)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestBuildRecordSteps(t *testing.T) {
	r := &buildRecord{}
	r.beginStep("images pushed")
	r.noteBuild("csi-provisioner v6.3.0", "csi-provisioner", time.Minute)
	r.endStep("images pushed", 70*time.Second)
	r.noteBuild("upstream busybox", "busybox", 2*time.Minute) // outside any step
	r.beginStep("etcd")
	r.endStep("etcd", time.Second)
	want := []recordEntry{
		{name: "images pushed", took: 70 * time.Second, built: []builtThing{{"csi-provisioner", time.Minute}}},
		{name: "upstream busybox", took: 2 * time.Minute, built: []builtThing{{"busybox", 2 * time.Minute}}},
		{name: "etcd", took: time.Second},
	}
	if got := r.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("entries %+v, want %+v", got, want)
	}
	if got := r.take(); got != nil {
		t.Errorf("after take: %+v, want nothing", got)
	}
	var nilRec *buildRecord // a Config that was never completed
	nilRec.beginStep("x")
	nilRec.noteBuild("y", "y", time.Second)
	nilRec.endStep("x", time.Second)
}

// fakeGo puts on PATH a "go" that answers list with three stale packages and builds by
// printing package names and writing each package's binary into the -o directory.
func fakeGo(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
case "$1" in
list) printf 'a\nb\nc\n'; exit 0 ;;
build)
	out=""; pkgs=""
	while [ $# -gt 0 ]; do
		case "$1" in
		-o) out="$2"; shift ;;
		-ldflags|-tags) shift ;;
		-*|build) ;;
		*) pkgs="$pkgs $1" ;;
		esac
		shift
	done
	echo "go: downloading example.com/m v1.0.0" >&2
	for p in a b c; do echo "$p" >&2; done
	for p in $pkgs; do
		case "$p" in */fail) echo "$p/x.go:1:1: broken" >&2; exit 1 ;; esac
		base=$(basename "$p"); case "$base" in v[0-9]*) base=$(basename "$(dirname "$p")") ;; esac
		printf 'bin' > "$out$base"; chmod +x "$out$base"
	done ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "go"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
}

func TestGoBuildReportsEachBinary(t *testing.T) {
	fakeGo(t)
	logs := &logLines{}
	rec := &buildRecord{}
	c := &Config{Logf: logs.logf, record: rec}
	bin := filepath.Join(t.TempDir(), "upstream-v1.37.1", "bin")
	pkgs := map[string]string{"etcd": "go.etcd.io/etcd/server/v3", "kubectl": "k8s.io/kubernetes/cmd/kubectl"}
	p := c.startBuild("upstream v1.37.1", binaryNames(pkgs), "")
	err := goBuild(context.Background(), p, t.TempDir(), bin, "-s -w", nil, pkgs)
	p.end(err)
	if err != nil {
		t.Fatal(err)
	}
	for name := range pkgs {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Errorf("binary %s: %v", name, err)
		}
	}
	got := logs.take()
	if len(got) != 5 {
		t.Fatalf("want 5 lines (start, expected packages, two binaries, end), got:\n%s", strings.Join(got, "\n"))
	}
	if !strings.HasSuffix(got[1], ": 3 packages to compile") || !strings.Contains(got[4], "built in") || !strings.HasSuffix(got[4], "(3 packages compiled)") {
		t.Errorf("lines:\n%s", strings.Join(got, "\n"))
	}
	built := strings.Join(got[2:4], "\n")
	for _, name := range []string{"etcd built", "kubectl built", "[1/2]", "[2/2]"} {
		if !strings.Contains(built, name) {
			t.Errorf("no %q in the binaries' lines:\n%s", name, built)
		}
	}
	if e := rec.take(); len(e) != 1 || e[0].name != "upstream v1.37.1" || e[0].built[0].what != "etcd, kubectl" {
		t.Errorf("record %+v, want the build of etcd, kubectl", e)
	}
}

func TestGoBuildFailureShowsTheErrorNotThePackages(t *testing.T) {
	fakeGo(t)
	logs := &logLines{}
	c := &Config{Logf: logs.logf, record: &buildRecord{}}
	bin := filepath.Join(t.TempDir(), "bin")
	pkgs := map[string]string{"x": "example.com/fail"}
	p := c.startBuild("x", binaryNames(pkgs), "")
	err := goBuild(context.Background(), p, t.TempDir(), bin, "", nil, pkgs)
	p.end(err)
	if err == nil {
		t.Fatal("want an error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "go build in ") || !strings.Contains(msg, "example.com/fail/x.go:1:1: broken") || strings.Contains(msg, "\na\n") {
		t.Errorf("error %q: want the go tool's error without the package names", msg)
	}
	if _, err := os.Stat(bin); !os.IsNotExist(err) {
		t.Errorf("bin dir after a failed build: %v, want none", err)
	}
	if got := c.record.take(); got != nil {
		t.Errorf("record %+v, want nothing", got)
	}
}
