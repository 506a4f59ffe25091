package logs

import (
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeRuntime has one running container writing to path; reopen creates
// the file again, as the runtime does.
type fakeRuntime struct {
	path     string
	reopens  int
	failOpen bool
	state    runtimeapi.ContainerState
	statuses int
	lists    int
	gone     bool // no container runs
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.lists++
	if f.gone {
		return nil, nil
	}
	return []*runtimeapi.Container{{Id: "c1", State: f.state}}, nil
}

func (f *fakeRuntime) ContainerStatus(context.Context, string, bool) (*runtimeapi.ContainerStatusResponse, error) {
	f.statuses++
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: "c1", State: f.state, LogPath: f.path}}, nil
}

func (f *fakeRuntime) ReopenContainerLog(context.Context, string) error {
	f.reopens++
	if f.failOpen {
		return os.ErrPermission
	}
	return os.WriteFile(f.path, nil, 0o644)
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// newRotator is a Rotator of logs of at most 100 bytes, 3 files, over one running
// container's log, 0.log in a new directory, with a fake clock at start.
func newRotator(t *testing.T, start time.Time) (dir, path string, rt *fakeRuntime, clk *clocktesting.FakeClock, r *Rotator) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "0.log")
	rt = &fakeRuntime{path: path, state: runtimeapi.ContainerState_CONTAINER_RUNNING}
	clk = clocktesting.NewFakeClock(start)
	r, err := New(Config{Runtime: rt, MaxSize: 100, MaxFiles: 3, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return dir, path, rt, clk, r
}

func TestRotationKeepsMaxFiles(t *testing.T) {
	dir, path, rt, clk, r := newRotator(t, time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC))
	ctx := context.Background()
	write := func(n int) {
		if err := os.WriteFile(path, []byte(strings.Repeat("x", n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(100)
	r.RotateAll(ctx)
	if got := listDir(t, dir); len(got) != 1 || rt.reopens != 0 {
		t.Fatalf("a log at the limit was rotated: %v, %d reopens", got, rt.reopens)
	}
	for i := range 4 {
		write(101)
		r.RotateAll(ctx)
		clk.Step(time.Second)
		if rt.reopens != i+1 {
			t.Fatalf("round %d: %d reopens", i, rt.reopens)
		}
		if got := listDir(t, dir); len(got) > 3 {
			t.Fatalf("round %d: %d files %v, more than MaxFiles", i, len(got), got)
		}
	}
	if got := listDir(t, dir); strings.Join(got, " ") != "0.log 0.log.20261122-080002 0.log.20261122-080003" {
		t.Errorf("after four rotations: %v", got)
	}
	// A quiet round tidies down to MaxFiles-1, making room for the next rotation.
	r.RotateAll(ctx)
	want := []string{"0.log", "0.log.20261122-080003"}
	if got := listDir(t, dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("files %v, want %v", got, want)
	}
}

func TestFailedReopenPutsTheLogBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	rt := &fakeRuntime{path: path, failOpen: true, state: runtimeapi.ContainerState_CONTAINER_RUNNING}
	r, _ := New(Config{Runtime: rt, MaxSize: 10, MaxFiles: 2, Clock: clocktesting.NewFakeClock(time.Now())})
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.RotateAll(context.Background())
	if got := listDir(t, dir); len(got) != 1 || got[0] != "0.log" {
		t.Errorf("after a failed reopen: %v, want the live log back in place", got)
	}
}

func TestCutRotationLeftoversRemoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	rt := &fakeRuntime{path: path, state: runtimeapi.ContainerState_CONTAINER_RUNNING}
	r, _ := New(Config{Runtime: rt, MaxSize: 1000, MaxFiles: 5, Clock: clocktesting.NewFakeClock(time.Now())})
	for _, f := range []string{"0.log", "0.log.20261122-080000.gz.tmp", "1.log"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r.RotateAll(context.Background())
	if got := strings.Join(listDir(t, dir), " "); got != "0.log 1.log" {
		t.Errorf("files %q, want the temporary file gone and another restart's log untouched", got)
	}
}

func TestConfigValidation(t *testing.T) {
	rt := &fakeRuntime{}
	for _, cfg := range []Config{{MaxSize: 1, MaxFiles: 2}, {Runtime: rt, MaxSize: 0, MaxFiles: 2}, {Runtime: rt, MaxSize: 1, MaxFiles: 1}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestOlderRotatedFilesCompressed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	rt := &fakeRuntime{path: path, state: runtimeapi.ContainerState_CONTAINER_RUNNING}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC))
	r, _ := New(Config{Runtime: rt, MaxSize: 10, MaxFiles: 5, Clock: clk})
	for range 3 {
		if err := os.WriteFile(path, []byte(strings.Repeat("y", 11)), 0o644); err != nil {
			t.Fatal(err)
		}
		r.RotateAll(context.Background())
		clk.Step(time.Second)
	}
	want := "0.log 0.log.20261122-080000.gz 0.log.20261122-080001 0.log.20261122-080002"
	if got := strings.Join(listDir(t, dir), " "); got != want {
		t.Fatalf("files %q, want %q", got, want)
	}
	f, err := os.Open(filepath.Join(dir, "0.log.20261122-080000.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil || string(b) != strings.Repeat("y", 11) {
		t.Errorf("compressed content %q %v", b, err)
	}
}

// failingWriter fails every write as a full disk does.
type failingWriter struct{ *os.File }

func (w failingWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestRotationGoesOnWhenCompressionFails: with the disk full, no older file can be
// compressed, yet the live log is rotated every round and the files stay within MaxFiles;
// once there is room again, the older files are compressed.
func TestRotationGoesOnWhenCompressionFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	rt := &fakeRuntime{path: path, state: runtimeapi.ContainerState_CONTAINER_RUNNING}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC))
	r, _ := New(Config{Runtime: rt, MaxSize: 10, MaxFiles: 4, Clock: clk})
	create := createCompressed
	t.Cleanup(func() { createCompressed = create })
	createCompressed = func(p string) (io.WriteCloser, error) {
		f, err := create(p)
		if err != nil {
			return nil, err
		}
		return failingWriter{f.(*os.File)}, nil
	}
	for round := 1; round <= 5; round++ {
		if err := os.WriteFile(path, []byte(strings.Repeat("z", 11)), 0o644); err != nil {
			t.Fatal(err)
		}
		r.RotateAll(context.Background())
		clk.Step(time.Second)
		if rt.reopens != round {
			t.Fatalf("round %d: %d rotations, want one a round", round, rt.reopens)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
			t.Fatalf("round %d: live log %v %v, want it new and empty", round, fi, err)
		}
		if files := listDir(t, dir); len(files) > 4 {
			t.Fatalf("round %d: files %q, more than MaxFiles", round, files)
		}
	}
	want := "0.log 0.log.20261122-080002 0.log.20261122-080003 0.log.20261122-080004"
	if got := strings.Join(listDir(t, dir), " "); got != want {
		t.Fatalf("files %q, want %q (none compressed, no temporary left)", got, want)
	}
	createCompressed = create
	r.RotateAll(context.Background())
	want = "0.log 0.log.20261122-080003.gz 0.log.20261122-080004"
	if got := strings.Join(listDir(t, dir), " "); got != want {
		t.Fatalf("with room again: files %q, want %q", got, want)
	}
}

// The runtime is asked for a container's log path once, not every round; a container that
// stops running is forgotten, and asked for again if it runs again. Quiet rounds do not
// read the log's directory: a leftover of a cut rotation appearing later (it cannot, but
// the test makes one) waits for the next rotation.
func TestLogPathAskedOncePerContainer(t *testing.T) {
	dir, path, rt, _, r := newRotator(t, time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC))
	ctx := context.Background()
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.RotateAll(ctx)
	}
	if rt.statuses != 1 {
		t.Errorf("ContainerStatus asked %d times in 3 rounds, want once", rt.statuses)
	}
	leftover := path + ".20261127-070000.gz.tmp"
	if err := os.WriteFile(leftover, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.RotateAll(ctx)
	if _, err := os.Stat(leftover); err != nil {
		t.Errorf("a quiet round read the directory: %v", err)
	}
	// It grows past the limit: the round tidies, then rotates.
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 101)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.RotateAll(ctx)
	if got := strings.Join(listDir(t, dir), " "); got != "0.log 0.log.20261127-080000" || rt.reopens != 1 {
		t.Errorf("after growing: files %q, %d reopens; want the leftover gone and one rotation", got, rt.reopens)
	}
	rt.gone = true
	r.RotateAll(ctx)
	rt.gone = false
	r.RotateAll(ctx)
	if rt.statuses != 2 {
		t.Errorf("ContainerStatus asked %d times, want again once the container ran again", rt.statuses)
	}
}

// With the agent's own list of running containers, a round asks the runtime nothing but a
// new container's log path; while that list is not known yet, it lists the runtime's.
func TestRunningFromTheAgentsList(t *testing.T) {
	dir, path, rt, clk, r := newRotator(t, time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC))
	var ids []string
	known := false
	r.cfg.Running = func() ([]string, bool) { return ids, known }
	ctx := context.Background()
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 101)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.RotateAll(ctx)
	if rt.lists != 1 || rt.reopens != 1 {
		t.Fatalf("before the agent knew: %d lists, %d reopens; want the runtime listed and the log rotated", rt.lists, rt.reopens)
	}
	known = true
	for range 3 {
		r.RotateAll(ctx)
	}
	if rt.lists != 1 {
		t.Errorf("%d lists with the agent's list known (and empty), want none more", rt.lists-1)
	}
	ids = []string{"c1"}
	clk.Step(time.Second)
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 101)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.RotateAll(ctx)
	if rt.lists != 1 || rt.statuses != 2 || rt.reopens != 2 {
		t.Errorf("the container in the agent's list: %d lists, %d statuses, %d reopens; want 1, 2 (asked again after it was forgotten), 2", rt.lists, rt.statuses, rt.reopens)
	}
	if n := len(listDir(t, dir)); n != 3 {
		t.Errorf("%d files after two rotations, want 3: %v", n, listDir(t, dir))
	}
}
