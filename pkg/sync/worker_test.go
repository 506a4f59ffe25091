package sync

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	gosync "sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/pleg"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/volume"
)

// fakeStatus records what the worker hands the status manager.
type fakeStatus struct {
	mu        gosync.Mutex
	last      v1.PodStatus
	final     *v1.PodStatus
	forgotten []types.UID
}

func (f *fakeStatus) Forget(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten = append(f.forgotten, uid)
}

func (f *fakeStatus) Set(_ *v1.Pod, st v1.PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = st
}

func (f *fakeStatus) SetFinal(_ *v1.Pod, st v1.PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last, f.final = st, &st
}

type noSecrets struct{}

func (noSecrets) GetSecret(context.Context, string, string) (*v1.Secret, error) {
	return &v1.Secret{}, nil
}

type harness struct {
	t        *testing.T
	rt       *critesting.FakeRuntimeService
	img      *critesting.FakeImageService
	pleg     *pleg.PLEG
	status   *fakeStatus
	recorder *record.FakeRecorder
	d        *Dispatcher
	w        *Worker
}

func newHarness(t *testing.T, pod *v1.Pod, configure ...func(*Config)) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, rt: critesting.NewFakeRuntimeService(), img: critesting.NewFakeImageService(),
		status: &fakeStatus{}, recorder: record.NewFakeRecorder(1000)}
	h.img.SetFakeImages([]string{"docker.io/library/busybox:latest"})
	var err error
	h.pleg, err = pleg.New(pleg.Config{Runtime: h.rt, Clock: clock.RealClock{}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = h.pleg.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	root := t.TempDir()
	volumes, err := volume.NewManager(volume.Config{RootDir: root})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Runtime: h.rt, Images: h.img, Cache: h.pleg.Cache(), Relister: h.pleg,
		Status: h.status, Recorder: h.recorder, Secrets: noSecrets{}, Volumes: volumes, RootDir: root,
		PodOptions: runtime.PodOptions{PodLogsDir: t.TempDir()}, NodeIPs: []string{"10.0.0.1"}, RuntimeName: "fake"}
	for _, c := range configure {
		c(&cfg)
	}
	d, err := NewDispatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.d, h.w = d, d.newWorker(pod)
	return h
}

// sync runs the worker on fresh relists for one sync step, or for the
// ending steps that follow one another, until the pod is idle, synced
// once, or done. It returns whether the worker is done.
func (h *harness) sync(pod *v1.Pod, removed bool) bool {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		h.pleg.RelistSoon()
		observed, err := h.pleg.Cache().GetNewerThan(ctx, pod.UID, time.Now())
		if err != nil {
			h.t.Fatal(err)
		}
		// decide is pure: asking it first changes nothing.
		kind := decide(&h.w.state, input{pod: pod, removed: removed, observed: observed, now: time.Now()}).kind
		if i > 0 && (kind == stepSync || kind == stepIdle) {
			return false
		}
		before := h.w.state
		if _, done := h.w.pass(ctx, pod, removed, observed); done {
			return true
		}
		if kind == stepSync || kind == stepIdle || reflect.DeepEqual(before, h.w.state) {
			return false // synced once, or an ending step failed
		}
	}
	h.t.Fatal("the worker did not settle in 10 steps")
	return false
}

func (h *harness) containers(state runtimeapi.ContainerState) []string {
	h.rt.Lock()
	defer h.rt.Unlock()
	var out []string
	for _, c := range h.rt.Containers {
		if c.State == state {
			out = append(out, c.Metadata.Name)
		}
	}
	return out
}

func (h *harness) exit(name string, code int32) {
	h.rt.Lock()
	defer h.rt.Unlock()
	for _, c := range h.rt.Containers {
		if c.Metadata.Name == name && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			c.State, c.ExitCode, c.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, code, time.Now().UnixNano()
		}
	}
}

func (h *harness) events() string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

func TestWorkerRunsInitThenAppContainersAndEndsNeverPod(t *testing.T) {
	pod := basePod(withInit("init"), withPolicy(v1.RestartPolicyNever))
	h := newHarness(t, pod)

	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 1 || got[0] != "init" {
		t.Fatalf("after the first pass running = %v, want [init]", got)
	}
	if n := len(h.rt.Sandboxes); n != 1 {
		t.Fatalf("sandboxes = %d, want 1", n)
	}
	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 1 {
		t.Fatalf("app containers started while init runs: running = %v", got)
	}
	h.exit("init", 0)
	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 2 {
		t.Fatalf("after init, running = %v, want a and b", got)
	}
	ev := h.events()
	for _, want := range []string{"Normal Pulled Container image \"busybox\" already present", "Normal Created Container created", "Normal Started Container started"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %q:\n%s", want, ev)
		}
	}

	h.exit("a", 0)
	h.exit("b", 3)
	h.sync(pod, false)
	if h.status.final == nil || h.status.final.Phase != v1.PodFailed {
		t.Fatalf("final status = %+v, want phase Failed", h.status.final)
	}
	for _, sb := range h.rt.Sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Errorf("sandbox of an ended pod is %s, want stopped", sb.State)
		}
	}
	if len(h.rt.Containers) != 3 {
		t.Errorf("containers of an ended pod were removed before deletion: %d left", len(h.rt.Containers))
	}

	deleted := pod.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	h.sync(deleted, false)
	if len(h.rt.Containers) != 0 || len(h.rt.Sandboxes) != 0 {
		t.Errorf("after deletion %d containers and %d sandboxes left, want none", len(h.rt.Containers), len(h.rt.Sandboxes))
	}
	if !h.sync(deleted, true) {
		t.Error("worker not done after removal")
	}
}

func TestWorkerBacksOffCrashingContainer(t *testing.T) {
	pod := basePod(func(p *v1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] })
	h := newHarness(t, pod)
	h.sync(pod, false)
	h.exit("a", 1)
	h.sync(pod, false) // first restart is immediate
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 1 {
		t.Fatalf("first restart: running = %v", got)
	}
	h.exit("a", 1)
	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 0 {
		t.Fatalf("restarted inside the back-off: running = %v", got)
	}
	cs := h.status.last.ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonCrashLoop || cs.RestartCount != 1 {
		t.Errorf("status = %+v, want waiting CrashLoopBackOff with restartCount 1", cs)
	}
	if ev := h.events(); !strings.Contains(ev, "Warning BackOff Back-off restarting failed container a") {
		t.Errorf("no BackOff event:\n%s", ev)
	}
}

func TestWorkerImageNeverPull(t *testing.T) {
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Containers = []v1.Container{{Name: "a", Image: "example.com/missing:1", ImagePullPolicy: v1.PullNever}}
	})
	h := newHarness(t, pod)
	h.sync(pod, false) // creates the sandbox: a change, so the worker wakes itself
	<-h.w.wake
	h.sync(pod, false)
	cs := h.status.last.ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonErrImageNeverPull {
		t.Errorf("status = %+v, want waiting ErrImageNeverPull", cs.State)
	}
	if len(h.rt.Containers) != 0 {
		t.Errorf("a container was created without its image")
	}
	select {
	case <-h.w.wake:
		t.Error("a pass that changed nothing in the runtime woke the worker again at once")
	default:
	}
}

// blockingPuller is an image service whose pulls hang until cancelled.
type blockingPuller struct {
	Images
	started chan struct{}
	once    gosync.Once
}

func (b *blockingPuller) PullImage(ctx context.Context, _ *runtimeapi.ImageSpec, _ *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	b.once.Do(func() { close(b.started) })
	<-ctx.Done()
	return "", ctx.Err()
}

func TestDeletionAbandonsAPullInFlight(t *testing.T) {
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Containers = []v1.Container{{Name: "a", Image: "example.com/slow:1"}}
	})
	h := newHarness(t, pod)
	puller := &blockingPuller{Images: h.img, started: make(chan struct{})}
	h.w.deps.images = puller
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.w.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	h.w.poke()

	select {
	case <-puller.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the pull never started")
	}
	deleted := pod.DeepCopy()
	now := metav1.Now()
	grace := int64(30)
	deleted.DeletionTimestamp, deleted.DeletionGracePeriodSeconds = &now, &grace
	h.w.update(deleted, false)

	// The pull hangs for ever: only its cancellation lets the pod end.
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.status.mu.Lock()
		final := h.status.final
		h.status.mu.Unlock()
		if final != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deletion waited for the pull in flight")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	h.rt.Lock()
	left := len(h.rt.Sandboxes) + len(h.rt.Containers)
	h.rt.Unlock()
	if left != 0 {
		t.Errorf("%d sandboxes and containers left after the deletion", left)
	}
	if len(h.w.state.pulls) != 0 {
		t.Errorf("an abandoned pull counted as a failure: %v", h.w.state.pulls)
	}
	if h.w.state.phase != phaseCleaned || !h.w.state.confirmed {
		t.Errorf("state = %s confirmed=%t, want cleaned and confirmed", h.w.state.phase, h.w.state.confirmed)
	}
	if ev := h.events(); strings.Contains(ev, "Failed to pull image") {
		t.Errorf("an abandoned pull was reported as failed:\n%s", ev)
	}
}

// A static pod whose file is removed stops quietly, and its status is
// forgotten: its mirror pod goes too, so nothing is left to write it to.
func TestRemovedStaticPodIsForgotten(t *testing.T) {
	pod := basePod(func(p *v1.Pod) {
		p.Annotations = map[string]string{configSourceAnnotation: "file"}
	})
	h := newHarness(t, pod)
	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) == 0 {
		t.Fatal("the static pod does not run")
	}
	if !h.sync(pod, true) {
		t.Fatal("worker not done after removal")
	}
	if h.status.final != nil {
		t.Errorf("a removed static pod wrote a final status: %+v", h.status.final)
	}
	if len(h.status.forgotten) != 1 || h.status.forgotten[0] != pod.UID {
		t.Errorf("forgotten = %v, want the static pod's UID", h.status.forgotten)
	}
}

// A pod with nothing to do waits the resync period and up to the jitter's share more, at
// random, as the kubelet's pod workers do; without jitter, the period exactly.
func TestResyncWaitHasItsJitter(t *testing.T) {
	w := &Worker{settings: &settings{resync: time.Minute}}
	if got := w.resyncWait(); got != time.Minute {
		t.Errorf("without jitter: %v", got)
	}
	w.settings.resyncJitter = 0.5
	seen := map[time.Duration]bool{}
	for range 50 {
		got := w.resyncWait()
		if got < time.Minute || got >= 90*time.Second {
			t.Fatalf("with jitter 0.5: %v, not in [1m, 1m30s)", got)
		}
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Error("50 waits with jitter all the same")
	}
}

// A cleanup whose container removal fails does not go on to the sandbox
// (the runtime would force a stop and fail the same way), and the failed
// step is tried again later each time: a runtime too loaded to handle the
// containers' exits is not asked again every second by every pod.
func TestFailedCleanupBacksOffAndLeavesTheSandbox(t *testing.T) {
	pod := basePod(func(p *v1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] })
	h := newHarness(t, pod)
	h.sync(pod, false)
	deleted := pod.DeepCopy()
	now := metav1.Now()
	grace := int64(0)
	deleted.DeletionTimestamp, deleted.DeletionGracePeriodSeconds = &now, &grace
	stuck := errors.New("failed to set removing state: container is still running, to stop first")
	ctx := context.Background()
	var waits []time.Duration
	for range 6 {
		h.rt.InjectError("RemoveContainer", stuck)
		h.pleg.RelistSoon()
		observed, err := h.pleg.Cache().GetNewerThan(ctx, pod.UID, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		// The stop and final steps pass; only the cleanup fails.
		for range 5 {
			s := decide(&h.w.state, input{pod: deleted, observed: observed, now: time.Now()})
			wait, _ := h.w.pass(ctx, deleted, false, observed)
			if s.kind == stepCleanup {
				waits = append(waits, wait)
				break
			}
			h.pleg.RelistSoon()
			if observed, err = h.pleg.Cache().GetNewerThan(ctx, pod.UID, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := h.called("RemovePodSandbox"); got != 0 {
		t.Errorf("RemovePodSandbox called %d times while the container's removal failed, want 0", got)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	if !slices.Equal(waits, want) {
		t.Errorf("waits after the failed cleanups %v, want %v", waits, want)
	}
	// The removal works again: the cleanup finishes, and a later failure
	// starts from a second again.
	if h.sync(deleted, false); len(h.rt.Containers) != 0 || len(h.rt.Sandboxes) != 0 {
		t.Errorf("after the cleanup %d containers and %d sandboxes left, want none", len(h.rt.Containers), len(h.rt.Sandboxes))
	}
	if h.w.failedWait != 0 {
		t.Errorf("a wait of %s kept after a step that passed", h.w.failedWait)
	}
}

// A resync of a running pod creates nothing and builds no sandbox config: the host's
// resolver file, which building one reads, can be gone without a failure.
func TestResyncOfARunningPodBuildsNoSandboxConfig(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 10.0.0.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := basePod(func(p *v1.Pod) { p.Spec.DNSPolicy = v1.DNSDefault })
	h := newHarness(t, pod, func(c *Config) { c.PodOptions.DNS.ResolvConf = resolv })
	h.sync(pod, false)
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 2 {
		t.Fatalf("running = %v, want the pod's two containers", got)
	}
	_ = h.events()
	if err := os.Remove(resolv); err != nil {
		t.Fatal(err)
	}
	h.sync(pod, false)
	if ev := h.events(); strings.Contains(ev, eventSandboxFailed) {
		t.Fatalf("the resync of a running pod built a sandbox config: %s", ev)
	}
	// A pass that does create something still needs it, and says so.
	h.exit("a", 1)
	h.sync(pod, false)
	if ev := h.events(); !strings.Contains(ev, eventSandboxFailed) {
		t.Fatalf("a restart without the resolver file raised no %s: %q", eventSandboxFailed, ev)
	}
}
