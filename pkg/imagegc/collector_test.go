package imagegc

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	eventrecord "k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeCRI is cri-api's fake runtime and image services, with the image
// calls of *runtime.Client. Each ListImages is signalled on listed.
type fakeCRI struct {
	*critesting.FakeRuntimeService
	img    *critesting.FakeImageService
	listed chan struct{}
}

func (f *fakeCRI) ListImages(ctx context.Context) ([]*runtimeapi.Image, error) {
	defer func() {
		select {
		case f.listed <- struct{}{}:
		default:
		}
	}()
	return f.img.ListImages(ctx, nil)
}

func (f *fakeCRI) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	return f.img.RemoveImage(ctx, image)
}

// fakeFs is an image filesystem of capacity bytes holding the fake's
// images and other bytes of something else.
type fakeFs struct {
	img             *critesting.FakeImageService
	capacity, other uint64
	err             error
}

func (f *fakeFs) ImageFsStats(context.Context) (*statsapi.FsStats, error) {
	if f.err != nil {
		return nil, f.err
	}
	used := f.other
	f.img.Lock()
	for _, img := range f.img.Images {
		used += img.Size
	}
	f.img.Unlock()
	available := f.capacity - min(used, f.capacity)
	return &statsapi.FsStats{CapacityBytes: &f.capacity, AvailableBytes: &available, UsedBytes: &used}, nil
}

type fakeMetrics map[string]int

func (m fakeMetrics) ObserveImageGarbageCollected(reason string) { m[reason]++ }

// world is a fake runtime and image filesystem, a fake clock at t0, and a
// Collector over them, made at t0.
type world struct {
	t       *testing.T
	cri     *fakeCRI
	fs      *fakeFs
	rec     *eventrecord.FakeRecorder
	metrics fakeMetrics
	clock   *clocktesting.FakeClock
	c       *Collector
}

var node = &v1.ObjectReference{Kind: "Node", Name: "node-1", UID: "node-1"}

func newWorld(t *testing.T, policy Policy) *world {
	img := critesting.NewFakeImageService()
	w := &world{
		t:       t,
		cri:     &fakeCRI{FakeRuntimeService: critesting.NewFakeRuntimeService(), img: img, listed: make(chan struct{}, 10)},
		fs:      &fakeFs{img: img, capacity: 1000},
		rec:     eventrecord.NewFakeRecorder(100),
		metrics: fakeMetrics{},
		clock:   clocktesting.NewFakeClock(t0),
	}
	var err error
	w.c, err = New(Config{Runtime: w.cri, ImageFs: w.fs, Recorder: w.rec, Node: node, Policy: policy,
		Clock: w.clock, Metrics: w.metrics})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// image adds an image of size bytes, its ID id.
func (w *world) image(id string, size uint64, mut ...func(*runtimeapi.Image)) {
	img := &runtimeapi.Image{Id: id, Size: size, Spec: &runtimeapi.ImageSpec{Image: id}, RepoTags: []string{id + ":tag"}}
	for _, m := range mut {
		m(img)
	}
	w.cri.img.Lock()
	defer w.cri.img.Unlock()
	w.cri.img.Images[id] = img
}

func pinned(img *runtimeapi.Image) { img.Pinned = true }

// container adds a container made from image, in state.
func (w *world) container(id, image string, state runtimeapi.ContainerState, mut ...func(*critesting.FakeContainer)) {
	c := &critesting.FakeContainer{SandboxID: "sb", ContainerStatus: runtimeapi.ContainerStatus{
		Id: id, State: state, Image: &runtimeapi.ImageSpec{Image: image}, ImageRef: image,
		Metadata: &runtimeapi.ContainerMetadata{Name: id},
	}}
	for _, m := range mut {
		m(c)
	}
	w.cri.Lock()
	defer w.cri.Unlock()
	w.cri.Containers[id] = c
}

// mounting makes a container mount image as an image volume.
func mounting(image string) func(*critesting.FakeContainer) {
	return func(c *critesting.FakeContainer) {
		c.Mounts = append(c.Mounts, &runtimeapi.Mount{ContainerPath: "/vol", Image: &runtimeapi.ImageSpec{Image: image}})
	}
}

func (w *world) removeContainer(id string) {
	w.cri.Lock()
	defer w.cri.Unlock()
	delete(w.cri.Containers, id)
}

// images lists the images left, sorted.
func (w *world) images() string {
	w.cri.img.Lock()
	defer w.cri.img.Unlock()
	return strings.Join(slices.Sorted(maps.Keys(w.cri.img.Images)), " ")
}

// events drains the events recorded so far.
func (w *world) events() []string {
	var out []string
	for {
		select {
		case e := <-w.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// collectAt moves the clock to t0 plus m minutes and collects.
func (w *world) collectAt(m int) error {
	w.t.Helper()
	w.clock.SetTime(at(m))
	return w.c.Collect(context.Background())
}

func TestCollectFreesLeastRecentlyUsedDownToTheLowThreshold(t *testing.T) {
	w := newWorld(t, DefaultPolicy)
	for _, id := range []string{"a", "b", "c", "d"} {
		w.image(id, 50)
	}
	w.image("pause", 50, pinned)
	w.fs.other = 500 // 75% full
	w.container("cb", "b", runtimeapi.ContainerState_CONTAINER_EXITED)
	w.container("cc", "c", runtimeapi.ContainerState_CONTAINER_RUNNING)
	if err := w.collectAt(0); err != nil {
		t.Fatal(err)
	}
	w.removeContainer("cb") // b was last used at t0, c a minute later
	if err := w.collectAt(1); err != nil {
		t.Fatal(err)
	}
	w.removeContainer("cc")
	if err := w.collectAt(3); err != nil {
		t.Fatal(err)
	}
	if got := w.images(); got != "a b c d pause" {
		t.Fatalf("below the high threshold: %q left, want every image", got)
	}

	w.fs.other = 700 // 95% full: 150 bytes to free to reach 80%
	if err := w.collectAt(5); err != nil {
		t.Fatal(err)
	}
	// Never used (a, d), then the least recently used (b); c and the
	// pinned sandbox image stay.
	if got := w.images(); got != "c pause" {
		t.Errorf("left %q, want c and pause", got)
	}
	if w.metrics["space"] != 3 || w.metrics["age"] != 0 {
		t.Errorf("metrics %v, want 3 removed for space", w.metrics)
	}
	if ev := w.events(); len(ev) != 0 {
		t.Errorf("events %v, want none", ev)
	}
}

func TestCollectSparesImagesInUseAndPinned(t *testing.T) {
	w := newWorld(t, DefaultPolicy)
	for _, id := range []string{"running", "exited", "created", "volume"} {
		w.image(id, 100)
	}
	w.image("pause", 100, pinned)
	w.image("free", 50)
	w.image("tagged", 50)
	w.fs.other = 300 // full: 200 bytes to free, 100 of them unused
	w.container("c1", "running", runtimeapi.ContainerState_CONTAINER_RUNNING, mounting("volume"))
	w.container("c2", "exited", runtimeapi.ContainerState_CONTAINER_EXITED)
	w.container("c3", "created", runtimeapi.ContainerState_CONTAINER_CREATED)
	// A runtime that names the image by its repo digest.
	w.image("digested", 100, func(img *runtimeapi.Image) { img.RepoDigests = []string{"reg/app@sha256:1"} })
	w.container("c4", "reg/app@sha256:1", runtimeapi.ContainerState_CONTAINER_EXITED)
	// A container made from an image since retagged: the tag's new image is not in use.
	w.container("c5", "old-id", runtimeapi.ContainerState_CONTAINER_EXITED, func(c *critesting.FakeContainer) {
		c.Image = &runtimeapi.ImageSpec{Image: "tagged:tag"}
	})

	_ = w.collectAt(0) // nothing is past the minimum age yet
	w.events()
	err := w.collectAt(2)
	if got := w.images(); got != "created digested exited pause running volume" {
		t.Errorf("left %q, want every image in use and the pinned one", got)
	}
	const msg = "Insufficient free disk space on the node's image filesystem (100% of 1000 B used). " +
		"Failed to free sufficient space by deleting unused images (freed 100 bytes). " +
		"Investigate disk usage, as it could be used by active images, logs, volumes, or other data."
	if err == nil || err.Error() != msg {
		t.Errorf("err = %v, want %q", err, msg)
	}
	if ev := w.events(); !slices.Equal(ev, []string{"Warning FreeDiskSpaceFailed " + msg}) {
		t.Errorf("events %q, want one FreeDiskSpaceFailed", ev)
	}
}

func TestCollectKeepsNewImagesForTheMinimumAge(t *testing.T) {
	w := newWorld(t, DefaultPolicy)
	w.fs.other = 900 // always over the high threshold
	if err := w.collectAt(0); err == nil {
		t.Fatal("no error although nothing could be freed")
	}
	w.events()
	w.image("pulled", 10) // at t0+1m, for a container about to be made
	for _, m := range []int{1, 2} {
		_ = w.collectAt(m)
		if got := w.images(); got != "pulled" {
			t.Fatalf("at t0+%dm: %q left, want the new image kept", m, got)
		}
	}
	_ = w.collectAt(3)
	if got := w.images(); got != "" {
		t.Errorf("two minutes after it was first seen: %q left, want it removed", got)
	}
}

func TestCollectRemovesImagesUnusedForTheMaximumAge(t *testing.T) {
	w := newWorld(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: 10 * time.Minute})
	w.image("used", 10)
	w.image("never", 10)
	w.image("busy", 10)
	w.image("pause", 10, pinned)
	w.container("c1", "used", runtimeapi.ContainerState_CONTAINER_RUNNING)
	w.container("c2", "busy", runtimeapi.ContainerState_CONTAINER_RUNNING)
	for m := 0; m <= 5; m++ {
		if err := w.collectAt(m); err != nil {
			t.Fatal(err)
		}
	}
	w.removeContainer("c1") // last seen used at t0+5m
	for _, step := range []struct {
		m    int
		want string
	}{
		{10, "busy never pause used"}, // the agent has not run for the maximum age yet
		{11, "busy pause used"},       // never used: more than ten minutes since first seen
		{15, "busy pause used"},       // last used exactly ten minutes ago
		{16, "busy pause"},
	} {
		if err := w.collectAt(step.m); err != nil {
			t.Fatal(err)
		}
		if got := w.images(); got != step.want {
			t.Errorf("at t0+%dm: %q left, want %q", step.m, got, step.want)
		}
	}
	if w.metrics["age"] != 2 || w.metrics["space"] != 0 {
		t.Errorf("metrics %v, want 2 removed for age", w.metrics)
	}
}

func TestCollectPassesOverAFailedRemoval(t *testing.T) {
	w := newWorld(t, DefaultPolicy)
	w.image("a", 100)
	w.image("b", 100)
	if err := w.collectAt(0); err != nil {
		t.Fatal(err)
	}
	w.fs.other = 800 // full: 200 bytes to free
	w.cri.img.InjectError("RemoveImage", errors.New("image is busy"))
	err := w.collectAt(2)
	if err == nil || !strings.Contains(err.Error(), "image is busy") || !strings.Contains(err.Error(), "wanted to free 200 bytes, but freed 100 bytes") {
		t.Errorf("err = %v, want the failed removal", err)
	}
	if got := w.images(); got != "a" {
		t.Errorf("left %q, want a (whose removal failed) alone", got)
	}
	if ev := w.events(); len(ev) != 0 {
		t.Errorf("events %v: a failed removal is no lack of space", ev)
	}
	if err := w.collectAt(3); err != nil {
		t.Fatal(err)
	}
	if got := w.images(); got != "" {
		t.Errorf("after a retry: %q left", got)
	}
}

func TestCollectNeedsTheImageFilesystemsSize(t *testing.T) {
	w := newWorld(t, DefaultPolicy)
	w.image("a", 100)
	w.fs.capacity = 0
	if err := w.collectAt(0); err == nil || err.Error() != "invalid capacity 0 on image filesystem" {
		t.Errorf("err = %v", err)
	}
	if ev := w.events(); !slices.Equal(ev, []string{"Warning InvalidDiskCapacity invalid capacity 0 on image filesystem"}) {
		t.Errorf("events %q", ev)
	}
	w.fs.err = errors.New("statfs failed")
	if err := w.collectAt(1); err == nil || w.images() != "a" {
		t.Errorf("err = %v, %q left: want an error and nothing removed", err, w.images())
	}
}

func TestDeleteUnusedImagesWhateverTheUsage(t *testing.T) {
	w := newWorld(t, DefaultPolicy)
	w.image("a", 100)
	w.image("b", 100)
	w.image("used", 100)
	w.image("pause", 100, pinned)
	w.container("c1", "used", runtimeapi.ContainerState_CONTAINER_EXITED)
	if err := w.collectAt(0); err != nil {
		t.Fatal(err)
	}
	w.image("young", 100) // pulled a minute before the call
	if err := w.collectAt(3); err != nil {
		t.Fatal(err)
	}
	w.clock.SetTime(at(4))
	if err := w.c.DeleteUnusedImages(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := w.images(); got != "pause used young" {
		t.Errorf("left %q, want those in use, pinned or younger than the minimum age", got)
	}
	if w.metrics["space"] != 2 {
		t.Errorf("metrics %v", w.metrics)
	}
}

func TestRunCollectsAtStartAndEveryPeriodAndReportsRepeatedFailures(t *testing.T) {
	w := newWorld(t, DefaultPolicy)
	failure := errors.New("runtime is away")
	w.cri.img.InjectError("ListImages", failure)
	w.cri.img.InjectError("ListImages", failure)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.c.Run(ctx) }()

	wait := func(what string) {
		t.Helper()
		select {
		case <-w.cri.listed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no collection %s", what)
		}
	}
	wait("at start")
	w.clock.Step(DefaultPeriod - time.Second)
	w.clock.Step(time.Second)
	wait("one period after start")
	select {
	case e := <-w.rec.Events:
		want := "Warning ImageGCFailed runtime is away"
		if e != want {
			t.Errorf("event %q, want %q", e, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event after the second failure in a row")
	}
	w.clock.Step(DefaultPeriod)
	wait("two periods after start")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if ev := w.events(); len(ev) != 0 {
		t.Errorf("events after a success: %v (the first failure records none either)", ev)
	}
	w.cri.img.Lock()
	n := 0
	for _, call := range w.cri.img.Called {
		if call == "ListImages" {
			n++
		}
	}
	w.cri.img.Unlock()
	if n != 3 {
		t.Errorf("%d collections, want 3: at start and after each of two periods", n)
	}
}

// With the high threshold at 100% and no maximum age nothing is collected,
// but the images are still tracked: on request, those seen long enough
// ago can go.
func TestRunRemovesNothingWhenOffButTracksTheImages(t *testing.T) {
	w := newWorld(t, Policy{HighThresholdPercent: 100, LowThresholdPercent: 80, MinAge: 2 * time.Minute})
	w.image("a", 100)
	w.fs.other = 900 // full
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.c.Run(ctx) }()
	for i := range 2 {
		select {
		case <-w.cri.listed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no look at the images %d periods after start", i)
		}
		w.clock.Step(DefaultPeriod)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if got := w.images(); got != "a" {
		t.Fatalf("%q left with image GC off, want a", got)
	}
	if ev := w.events(); len(ev) != 0 {
		t.Errorf("events %v with image GC off", ev)
	}
	// Seen at start, ten minutes ago: past the minimum age.
	if err := w.c.DeleteUnusedImages(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := w.images(); got != "" {
		t.Errorf("%q left after DeleteUnusedImages", got)
	}
}

func TestNewValidates(t *testing.T) {
	w := newWorld(t, DefaultPolicy)
	if _, err := New(Config{Runtime: w.cri, ImageFs: w.fs, Recorder: w.rec, Node: node,
		Policy: Policy{HighThresholdPercent: 80, LowThresholdPercent: 85}}); err == nil {
		t.Error("a low threshold above the high one was accepted")
	}
	if _, err := New(Config{Runtime: w.cri, ImageFs: w.fs, Recorder: w.rec}); err == nil {
		t.Error("no Node was accepted")
	}
	c, err := New(Config{Runtime: w.cri, ImageFs: w.fs, Recorder: w.rec, Node: node})
	if err != nil || c.cfg.Policy != DefaultPolicy || c.cfg.Period != DefaultPeriod {
		t.Errorf("defaults: %+v, %v", c.cfg, err)
	}
}
