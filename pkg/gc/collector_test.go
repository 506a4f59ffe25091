package gc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/pleg"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// world is a fake runtime seen through a real PLEG, and a pod logs
// directory on disk.
type world struct {
	t       *testing.T
	rt      *critesting.FakeRuntimeService
	pleg    *pleg.PLEG
	clock   *clocktesting.FakeClock
	logs    string
	held    map[types.UID]bool
	listed  bool
	created int
	c       *Collector
}

func newWorld(t *testing.T) *world {
	clk := clocktesting.NewFakeClock(t0)
	w := &world{t: t, rt: critesting.NewFakeRuntimeService(), clock: clk, logs: t.TempDir(),
		held: map[types.UID]bool{}, listed: true}
	p, err := pleg.New(pleg.Config{Runtime: w.rt, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	w.pleg = p
	w.c, err = New(Config{Runtime: w.rt, View: p.Cache(), PodLogsDir: w.logs, Clock: clk,
		Held: func() map[types.UID]bool { return w.held }, Listed: func() bool { return w.listed }})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) logDir(uid string) string { return filepath.Join(w.logs, "ns_p_"+uid) }

// sandbox adds a sandbox of pod uid and makes its log directory.
func (w *world) sandbox(uid, id string, ready bool) {
	w.t.Helper()
	state := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if ready {
		state = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	w.created++
	w.rt.Sandboxes[id] = &critesting.FakePodSandbox{PodSandboxStatus: runtimeapi.PodSandboxStatus{
		Id: id, State: state, CreatedAt: at(w.created).UnixNano(),
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: uid},
		Labels:   map[string]string{runtime.LabelPodUID: uid, runtime.LabelPodName: "p", runtime.LabelPodNamespace: "ns"},
	}}
	if err := os.MkdirAll(w.logDir(uid), 0o755); err != nil {
		w.t.Fatal(err)
	}
}

// container adds a container of pod uid in sandbox sb, with its log file
// <restarts>.log and a rotated one beside it, and returns the log's path.
func (w *world) container(uid, sb, id, name string, restarts int, state runtimeapi.ContainerState) string {
	w.t.Helper()
	log := filepath.Join(w.logDir(uid), name, strconv.Itoa(restarts)+".log")
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		w.t.Fatal(err)
	}
	for _, f := range []string{log, log + ".20260101-000000.gz"} {
		if err := os.WriteFile(f, []byte("log\n"), 0o644); err != nil {
			w.t.Fatal(err)
		}
	}
	w.created++
	w.rt.Containers[id] = &critesting.FakeContainer{SandboxID: sb, ContainerStatus: runtimeapi.ContainerStatus{
		Id: id, State: state, CreatedAt: at(w.created).UnixNano(), LogPath: log,
		Metadata:    &runtimeapi.ContainerMetadata{Name: name, Attempt: uint32(restarts)},
		Labels:      map[string]string{runtime.LabelPodUID: uid, runtime.LabelPodName: "p", runtime.LabelPodNamespace: "ns", runtime.LabelContainer: name},
		Annotations: map[string]string{runtime.AnnotationRestartCount: strconv.Itoa(restarts)},
	}}
	return log
}

// collect relists, then runs one collection a moment later.
func (w *world) collect() error {
	w.t.Helper()
	w.clock.Step(time.Minute)
	if err := w.pleg.Relist(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	w.clock.Step(time.Second)
	return w.c.Collect(context.Background())
}

func (w *world) ids() []string {
	w.rt.Lock()
	defer w.rt.Unlock()
	var out []string
	for id := range w.rt.Containers {
		out = append(out, id)
	}
	for id := range w.rt.Sandboxes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestCollectTrimsARunningPodAndClearsAGoneOne(t *testing.T) {
	w := newWorld(t)
	// A crash loop: three attempts ended, the fourth runs.
	w.sandbox("run", "sb-run", true)
	logs := []string{
		w.container("run", "sb-run", "a0", "a", 0, runtimeapi.ContainerState_CONTAINER_EXITED),
		w.container("run", "sb-run", "a1", "a", 1, runtimeapi.ContainerState_CONTAINER_EXITED),
		w.container("run", "sb-run", "a2", "a", 2, runtimeapi.ContainerState_CONTAINER_EXITED),
		w.container("run", "sb-run", "a3", "a", 3, runtimeapi.ContainerState_CONTAINER_RUNNING),
	}
	w.held["run"] = true
	// A pod deleted and let go: a stopped sandbox, a dead container.
	w.sandbox("gone", "sb-gone", false)
	goneLog := w.container("gone", "sb-gone", "g0", "g", 0, runtimeapi.ContainerState_CONTAINER_EXITED)

	if err := w.collect(); err != nil {
		t.Fatal(err)
	}
	if got, want := w.ids(), []string{"a2", "a3", "sb-run"}; !slices.Equal(got, want) {
		t.Errorf("left in the runtime: %v, want %v", got, want)
	}
	for i, log := range logs {
		if kept := i >= 2; exists(log) != kept || exists(log+".20260101-000000.gz") != kept {
			t.Errorf("log %s (and its rotated file) kept: %t, want %t", log, exists(log), kept)
		}
	}
	if exists(goneLog) || exists(w.logDir("gone")) {
		t.Error("the gone pod's log directory is still there")
	}
	if !exists(w.logDir("run")) {
		t.Error("the running pod's log directory was removed")
	}
}

func TestCollectHoldsBackWhatAFailedRemovalLeaves(t *testing.T) {
	w := newWorld(t)
	w.sandbox("gone", "sb-gone", false)
	w.container("gone", "sb-gone", "g0", "g", 0, runtimeapi.ContainerState_CONTAINER_EXITED)
	w.rt.InjectError("RemoveContainer", errors.New("busy"))

	if err := w.collect(); err == nil {
		t.Fatal("a failed removal was not reported")
	}
	if got, want := w.ids(), []string{"g0", "sb-gone"}; !slices.Equal(got, want) {
		t.Errorf("left in the runtime: %v, want %v (the sandbox waits for its container)", got, want)
	}
	if !exists(w.logDir("gone")) {
		t.Error("the log directory went before the pod's container")
	}
	// The next collection finishes the job.
	if err := w.collect(); err != nil {
		t.Fatal(err)
	}
	if got := w.ids(); len(got) != 0 || exists(w.logDir("gone")) {
		t.Errorf("after a retry: %v left, log directory there: %t", got, exists(w.logDir("gone")))
	}
}

// Several agents may share a pod logs directory (the harness's nodes do):
// only the directories of pods this agent knew are its own.
func TestCollectRemovesOnlyItsOwnLogDirectories(t *testing.T) {
	w := newWorld(t)
	for _, uid := range []string{"mine", "other"} {
		if err := os.MkdirAll(filepath.Join(w.logDir(uid), "c"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w.held["mine"] = true
	if err := w.collect(); err != nil {
		t.Fatal(err)
	}
	if !exists(w.logDir("mine")) || !exists(w.logDir("other")) {
		t.Fatal("a log directory went while its pod is held or unknown")
	}
	delete(w.held, "mine") // deleted, and its worker is done
	if err := w.collect(); err != nil {
		t.Fatal(err)
	}
	if exists(w.logDir("mine")) {
		t.Error("the log directory of a pod that is gone is still there")
	}
	if !exists(w.logDir("other")) {
		t.Error("the log directory of a pod another agent runs was removed")
	}
	if err := w.collect(); err != nil {
		t.Fatal(err)
	}
	if w.c.known["mine"] {
		t.Error("a pod of which nothing is left is still remembered")
	}
}

func TestCollectWaitsForTheSourcesAndAFreshView(t *testing.T) {
	w := newWorld(t)
	w.sandbox("gone", "sb-gone", false)
	w.container("gone", "sb-gone", "g0", "g", 0, runtimeapi.ContainerState_CONTAINER_EXITED)
	w.listed = false
	if err := w.collect(); err != nil {
		t.Fatal(err)
	}
	if got := w.ids(); len(got) != 2 || !exists(w.logDir("gone")) {
		t.Fatalf("before the sources listed: %v left, log directory there: %t", got, exists(w.logDir("gone")))
	}

	w.listed = true
	c, err := New(Config{Runtime: w.rt, View: w.pleg.Cache(), PodLogsDir: w.logs, Clock: w.clock,
		Held: func() map[types.UID]bool { return nil }, Listed: func() bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	w.clock.Step(2 * time.Minute) // no relist since
	if err := c.Collect(context.Background()); err == nil {
		t.Fatal("a collection acted on a view two minutes old")
	}
	if got := w.ids(); len(got) != 2 {
		t.Errorf("a stale view removed something: %v left", got)
	}
}

func TestRunCollectsEveryPeriodFromOnePeriodAfterStart(t *testing.T) {
	w := newWorld(t)
	w.sandbox("gone", "sb-gone", false)
	if err := w.pleg.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Runtime: w.rt, View: w.pleg.Cache(), Clock: w.clock,
		Held: func() map[types.UID]bool { return nil }, Listed: func() bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for !w.clock.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	w.clock.Step(DefaultPeriod - time.Second)
	time.Sleep(20 * time.Millisecond)
	if got := len(w.ids()); got != 1 {
		t.Fatalf("collected before a period passed: %d objects left", got)
	}
	if err := w.pleg.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.clock.Step(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for len(w.ids()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("no collection one period after start")
		}
		time.Sleep(time.Millisecond)
	}
}
