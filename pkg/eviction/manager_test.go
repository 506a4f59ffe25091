package eviction

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
)

type fixture struct {
	stats    *fakeStats
	pods     *fakePods
	gcLog    []string
	recorder *fakeRecorder
	metrics  *fakeMetrics
	clock    *clocktesting.FakeClock
	m        *Manager
}

func newFixture(t *testing.T, thresholds []Threshold, layout DiskLayout, mut ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{stats: &fakeStats{}, pods: &fakePods{ended: map[types.UID]bool{}}, recorder: &fakeRecorder{},
		metrics: &fakeMetrics{}, clock: clocktesting.NewFakeClock(t0)}
	gc := fakeGC{log: &f.gcLog}
	cfg := Config{
		Thresholds: thresholds, MaxPodGracePeriodSeconds: 20,
		Stats: f.stats, Pods: f.pods, ImageGC: gc, ContainerGC: gc, Disks: fixedDisks(layout),
		Recorder: f.recorder, Node: &v1.ObjectReference{Kind: "Node", Name: "n1"}, Metrics: f.metrics, Clock: f.clock,
	}
	for _, m := range mut {
		m(&cfg)
	}
	var err error
	if f.m, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// sync is one pass that evicts one pod at most, which it returns.
func (f *fixture) sync(t *testing.T) *v1.Pod {
	t.Helper()
	pods := f.syncAll(t)
	switch len(pods) {
	case 0:
		return nil
	case 1:
		return pods[0]
	}
	t.Fatalf("one pass evicted %d pods: %s", len(pods), names(pods))
	return nil
}

// syncAll is one pass; it returns the pods evicted.
func (f *fixture) syncAll(t *testing.T) []*v1.Pod {
	t.Helper()
	pods, err := f.m.synchronize(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func nodefsHard(pct float64) Threshold {
	return Threshold{Signal: SignalNodeFsAvailable, Value: Value{Percentage: pct}}
}

func TestDiskPressureRelievedByGarbageCollection(t *testing.T) {
	f := newFixture(t, []Threshold{nodefsHard(0.1)}, DiskLayout{})
	a := pod("a", "", "", 0)
	f.pods.pods = []*v1.Pod{a}
	f.stats.summaries = []*statsapi.Summary{
		summary(nodeStats{fsAvail: 5, fsCap: 100}, podStats(a, 0, ctrStats("c", 0, 10, 1))),
		summary(nodeStats{fsAvail: 50, fsCap: 100}, podStats(a, 0, ctrStats("c", 0, 10, 1))),
	}
	if p := f.sync(t); p != nil {
		t.Fatalf("evicted %s although garbage collection freed enough", p.Name)
	}
	if got := strings.Join(f.gcLog, ","); got != "containers,images" {
		t.Errorf("reclaims = %s, want containers then images", got)
	}
	if len(f.pods.evicted) != 0 {
		t.Errorf("evicted = %v", f.pods.evicted)
	}
	if got := f.m.Pressure().Conditions(); len(got) != 1 || got[0] != v1.NodeDiskPressure {
		t.Errorf("conditions = %v, want DiskPressure", got)
	}
	if got := strings.Join(f.recorder.events, "\n"); got != "node/n1 Warning EvictionThresholdMet Attempting to reclaim ephemeral-storage" {
		t.Errorf("events = %s", got)
	}
}

func TestDiskPressureEvictsTheLargestUserAfterGarbageCollection(t *testing.T) {
	f := newFixture(t, []Threshold{nodefsHard(0.1)}, DiskLayout{})
	small, big := pod("small", "", "", 0), pod("big", "", "", 0)
	critical := pod("static", "", "", 0)
	critical.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	f.pods.pods = []*v1.Pod{small, big, critical}
	f.stats.summaries = []*statsapi.Summary{summary(nodeStats{fsAvail: 5 * mi, fsCap: 100 * mi},
		podStats(small, 0, ctrStats("c", 0, 1*mi, 0)),
		podStats(big, 0, ctrStats("c", 0, 30*mi, 2*mi)),
		podStats(critical, 0, ctrStats("c", 0, 90*mi, 0)))}
	evicted := f.sync(t)
	if evicted == nil || evicted.Name != "big" {
		t.Fatalf("evicted %v, want big (the static pod is critical)", evicted)
	}
	if got := strings.Join(f.gcLog, ","); got != "containers,images" {
		t.Errorf("reclaims = %s, want containers then images first", got)
	}
	msg := "The node was low on resource: ephemeral-storage. Threshold quantity: 10Mi, available: 5Mi. " +
		"Container c was using 32Mi, request is 0, has larger consumption of ephemeral-storage. "
	if want := "uid-big grace=1 Evicted: " + msg; len(f.pods.evicted) != 1 || f.pods.evicted[0] != want {
		t.Errorf("evictions = %q, want %q", f.pods.evicted, want)
	}
	if got := f.recorder.events[len(f.recorder.events)-1]; got != "pod/big Warning Evicted "+msg {
		t.Errorf("event = %q", got)
	}
	ann := f.recorder.annotations[len(f.recorder.annotations)-1]
	if ann[AnnotationStarvedResource] != "ephemeral-storage" || ann[AnnotationOffendingContainers] != "c" || ann[AnnotationOffendingContainersUsage] != "32Mi" {
		t.Errorf("annotations = %v", ann)
	}
}

func TestMemoryPressureEvictsWithoutGarbageCollection(t *testing.T) {
	f := newFixture(t, []Threshold{hardMemory("100Mi"), nodefsHard(0.1)}, DiskLayout{})
	burstable, bestEffort, gone := pod("burstable", "100Mi", "", 0), pod("besteffort", "", "", 0), pod("gone", "", "", -10)
	f.pods.pods = []*v1.Pod{burstable, bestEffort, gone}
	f.pods.refuse = map[types.UID]bool{gone.UID: true}
	f.stats.summaries = []*statsapi.Summary{summary(nodeStats{memAvail: 50 * mi, memWS: 950 * mi, fsAvail: 5, fsCap: 100, at: metaTime(t0.Add(-3 * time.Second))},
		podStats(burstable, 200*mi, ctrStats("c", 200*mi, 0, 0)),
		podStats(bestEffort, 150*mi, ctrStats("c", 150*mi, 0, 0)),
		podStats(gone, 500*mi, ctrStats("c", 500*mi, 0, 0)))}
	evicted := f.sync(t)
	if evicted == nil || evicted.Name != "besteffort" {
		t.Fatalf("evicted %v, want besteffort (gone refused; then, both over their requests, the larger use above request)", evicted)
	}
	if len(f.gcLog) != 0 {
		t.Errorf("garbage collected for memory: %v", f.gcLog)
	}
	want := "uid-besteffort grace=1 Evicted: The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
		"Container c was using 150Mi, request is 0, has larger consumption of memory. "
	if len(f.pods.evicted) != 1 || f.pods.evicted[0] != want {
		t.Errorf("evictions = %q, want %q", f.pods.evicted, want)
	}
	if got := fmt.Sprint(f.m.Pressure().Conditions()); got != "[MemoryPressure DiskPressure]" {
		t.Errorf("conditions = %s", got)
	}
	// The kubelet's DisruptionTarget, with the eviction's message and the
	// generation of the pod evicted.
	wantCond := v1.PodCondition{Type: v1.DisruptionTarget, ObservedGeneration: bestEffort.Generation, Status: v1.ConditionTrue,
		Reason: v1.PodReasonTerminationByKubelet, Message: strings.SplitN(want, "Evicted: ", 2)[1]}
	if len(f.pods.conditions) != 1 || f.pods.conditions[0] == nil || *f.pods.conditions[0] != wantCond {
		t.Errorf("conditions asked for = %+v, want %+v", f.pods.conditions, wantCond)
	}
	// Counted once, under the threshold's signal; the memory
	// measurement's age is observed for every threshold acted on.
	if got := strings.Join(f.metrics.evictions, " "); got != "memory.available" {
		t.Errorf("evictions counted = %q, want memory.available", got)
	}
	if got := strings.Join(f.metrics.ages, ", "); got != "memory.available 3s, nodefs.available 3s" {
		t.Errorf("stats ages = %q", got)
	}
}

func TestSoftThresholdEvictsAfterItsGracePeriodWithTheMaxPodGracePeriod(t *testing.T) {
	soft := Threshold{Signal: SignalMemoryAvailable, Value: Value{Quantity: qty("300Mi")}, GracePeriod: 30 * time.Second}
	f := newFixture(t, []Threshold{soft}, DiskLayout{})
	long, short := pod("long", "", "", 0), pod("short", "", "", 0)
	g5 := int64(5)
	short.Spec.TerminationGracePeriodSeconds = &g5
	f.pods.pods = []*v1.Pod{long, short}
	measure := func() {
		f.stats.summaries = []*statsapi.Summary{summary(nodeStats{memAvail: 200 * mi, memWS: 800 * mi, at: metaTime(f.clock.Now())},
			podStats(long, 500*mi), podStats(short, 100*mi))}
	}
	measure()
	if p := f.sync(t); p != nil {
		t.Fatalf("evicted %s before the grace period", p.Name)
	}
	if !f.m.Pressure().Has(v1.NodeMemoryPressure) {
		t.Error("no MemoryPressure while the soft threshold is met")
	}
	f.clock.Step(30 * time.Second)
	measure()
	if p := f.sync(t); p == nil || p.Name != "long" {
		t.Fatalf("evicted %v, want long", p)
	}
	if !strings.HasPrefix(f.pods.evicted[0], "uid-long grace=20 ") {
		t.Errorf("eviction = %q, want the max pod grace period", f.pods.evicted[0])
	}
	f.pods.pods = []*v1.Pod{short}
	f.clock.Step(10 * time.Second)
	measure()
	if p := f.sync(t); p == nil || !strings.HasPrefix(f.pods.evicted[1], "uid-short grace=5 ") {
		t.Errorf("evictions = %q, want short with its own shorter grace", f.pods.evicted)
	}
}

func TestNoThresholdsNoPressure(t *testing.T) {
	f := newFixture(t, nil, DiskLayout{})
	f.stats.err = fmt.Errorf("must not be asked")
	if p := f.sync(t); p != nil || f.m.Pressure().Conditions() != nil {
		t.Errorf("evicted %v, conditions %v", p, f.m.Pressure().Conditions())
	}
}

func TestDedicatedImageFsReclaimsOnlyForItsOwnFilesystem(t *testing.T) {
	nodefs := nodefsHard(0.1)
	f := newFixture(t, []Threshold{nodefs}, DiskLayout{DedicatedImageFs: true})
	a := pod("a", "", "", 0)
	f.pods.pods = []*v1.Pod{a}
	f.stats.summaries = []*statsapi.Summary{summary(nodeStats{fsAvail: 5, fsCap: 100, imageAvail: 90, imageCap: 100}, podStats(a, 0, ctrStats("c", 0, 0, 3)))}
	if p := f.sync(t); p == nil {
		t.Fatal("nothing evicted")
	}
	if len(f.gcLog) != 0 {
		t.Errorf("reclaimed %v for nodefs with a dedicated imagefs (nothing there is the node's)", f.gcLog)
	}
}

func TestRunWaitsForTheEvictedPodThenLooksAgain(t *testing.T) {
	f := newFixture(t, []Threshold{hardMemory("100Mi")}, DiskLayout{})
	a := pod("a", "", "", 0)
	f.pods.pods = []*v1.Pod{a}
	f.stats.summaries = []*statsapi.Summary{summary(nodeStats{memAvail: 50 * mi, memWS: 950 * mi}, podStats(a, 100*mi))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.m.Run(ctx) }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	evictions := func() int {
		f.pods.mu.Lock()
		defer f.pods.mu.Unlock()
		return len(f.pods.evicted)
	}
	waitFor("the first eviction", func() bool { return evictions() == 1 })
	waitFor("the wait for the pod to end", f.clock.HasWaiters)
	f.clock.Step(cleanupPoll)
	if evictions() != 1 {
		t.Fatal("evicted again before the pod ended")
	}
	f.pods.mu.Lock()
	f.pods.ended[a.UID] = true
	f.pods.mu.Unlock()
	f.clock.Step(cleanupPoll)
	// The pod ended: the next look comes at once, and evicts again since
	// the node is still short (the fake still shows the pod).
	waitFor("the look after the pod ended", func() bool { return evictions() == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
