package eviction

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// limitedPod is a pod of one container "c" with an ephemeral-storage
// limit of 10Mi and an emptyDir "scratch" with a sizeLimit of 10Mi.
func limitedPod(name string) *v1.Pod {
	p := pod(name, "", "", 0)
	p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("10Mi")}
	p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: qty("10Mi")}}}}
	return p
}

// storageStats are a pod's local storage numbers: its volumes' usage by
// name, and the containers' (writable layer and logs); the pod's
// ephemeral storage is their sum, as the Summary adds it up.
func storageStats(pod *v1.Pod, volumes map[string]int64, containers ...statsapi.ContainerStats) statsapi.PodStats {
	s := podStats(pod, 0, containers...)
	var total int64
	for _, c := range containers {
		r, _ := fsUsed(c.Rootfs)
		l, _ := fsUsed(c.Logs)
		total += r + l
	}
	for name, used := range volumes {
		s.VolumeStats = append(s.VolumeStats, statsapi.VolumeStats{Name: name, FsStats: statsapi.FsStats{UsedBytes: u64(used)}})
		total += used
	}
	s.EphemeralStorage = &statsapi.FsStats{UsedBytes: u64(total)}
	return s
}

// roomy adds a container "other" with a large limit: the pod's total
// limit then leaves room for "c" to be the one over its own.
func roomy(p *v1.Pod) {
	p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "other", Resources: v1.ResourceRequirements{
		Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}}})
}

func TestOverLimits(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	tests := []struct {
		name       string
		pod        func(*v1.Pod)
		volumes    map[string]int64
		containers []statsapi.ContainerStats
		dedicated  bool
		noStats    bool
		want       string
	}{
		{name: "within every limit", volumes: map[string]int64{"scratch": 4 * mi}, containers: []statsapi.ContainerStats{ctrStats("c", 0, 5*mi, 1*mi)}},
		{name: "emptyDir at its sizeLimit", volumes: map[string]int64{"scratch": 10 * mi},
			pod: func(p *v1.Pod) { p.Spec.Containers[0].Resources.Limits = nil }},
		{name: "emptyDir over its sizeLimit", volumes: map[string]int64{"scratch": 10*mi + 1},
			want: `Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". `},
		{name: "emptyDir without a sizeLimit", volumes: map[string]int64{"scratch": 100 * mi},
			pod: func(p *v1.Pod) {
				p.Spec.Volumes[0].EmptyDir.SizeLimit = nil
				p.Spec.Containers[0].Resources.Limits = nil
			}},
		{name: "emptyDir with a zero sizeLimit", volumes: map[string]int64{"scratch": 100 * mi},
			pod: func(p *v1.Pod) {
				p.Spec.Volumes[0].EmptyDir.SizeLimit = qty("0")
				p.Spec.Containers[0].Resources.Limits = nil
			}},
		{name: "memory-backed emptyDir over its sizeLimit, as with the kubelet's default gates", volumes: map[string]int64{"scratch": 11 * mi},
			pod: func(p *v1.Pod) {
				p.Spec.Volumes[0].EmptyDir.Medium = v1.StorageMediumMemory
				p.Spec.Containers[0].Resources.Limits = nil
			},
			want: `Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". `},
		{name: "emptyDir not measured yet", containers: []statsapi.ContainerStats{ctrStats("c", 0, 1*mi, 0)}},
		{name: "container's writable layer and logs over its limit", containers: []statsapi.ContainerStats{ctrStats("c", 0, 9*mi, 2*mi)},
			pod:  roomy,
			want: `Container c exceeded its local ephemeral storage limit "10Mi". `},
		{name: "a dedicated image filesystem holds the writable layer: it does not count", dedicated: true,
			containers: []statsapi.ContainerStats{ctrStats("c", 0, 20*mi, 2*mi)}, pod: roomy},
		{name: "a dedicated image filesystem: the logs still count", dedicated: true,
			containers: []statsapi.ContainerStats{ctrStats("c", 0, 0, 11*mi)}, pod: roomy,
			want: `Container c exceeded its local ephemeral storage limit "10Mi". `},
		{name: "the pod's total over the sum of its containers' limits", volumes: map[string]int64{"scratch": 5 * mi},
			containers: []statsapi.ContainerStats{ctrStats("c", 0, 8*mi, 0), ctrStats("d", 0, 8*mi, 0)},
			pod: func(p *v1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, *p.Spec.Containers[0].DeepCopy())
				p.Spec.Containers[1].Name = "d"
			},
			want: "Pod ephemeral local storage usage exceeds the total limit of containers 20Mi. "},
		{name: "the pod's total limit takes its overhead in", volumes: map[string]int64{"scratch": 5 * mi},
			containers: []statsapi.ContainerStats{ctrStats("c", 0, 8*mi, 0)},
			pod: func(p *v1.Pod) {
				p.Spec.Overhead = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("5Mi")}
			},
			want: ""},
		{name: "emptyDir first, then the pod, then the containers", volumes: map[string]int64{"scratch": 20 * mi},
			containers: []statsapi.ContainerStats{ctrStats("c", 0, 20*mi, 0)},
			want:       `Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". `},
		{name: "the pod before the container", containers: []statsapi.ContainerStats{ctrStats("c", 0, 20*mi, 0)},
			want: "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. "},
		{name: "a sidecar over its limit", containers: []statsapi.ContainerStats{ctrStats("side", 0, 11*mi, 0)},
			pod: func(p *v1.Pod) {
				p.Spec.Volumes = nil
				p.Spec.Containers[0].Resources.Limits = nil
				p.Spec.InitContainers = []v1.Container{{Name: "side", RestartPolicy: &always, Resources: v1.ResourceRequirements{
					Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("10Mi")}}}}
				p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "big", Resources: v1.ResourceRequirements{
					Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}}})
			},
			want: `Container side exceeded its local ephemeral storage limit "10Mi". `},
		{name: "no stats for the pod", noStats: true, volumes: map[string]int64{"scratch": 20 * mi}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := limitedPod("p")
			if tt.pod != nil {
				tt.pod(p)
			}
			var pods []statsapi.PodStats
			if !tt.noStats {
				pods = append(pods, storageStats(p, tt.volumes, tt.containers...))
			}
			got := overLimits([]*v1.Pod{p}, usageOf(pods), tt.dedicated)
			var msg, signal string
			switch len(got) {
			case 0:
			case 1:
				msg, signal = got[0].message, got[0].signal
			default:
				t.Fatalf("%d breaches for one pod", len(got))
			}
			if msg != tt.want {
				t.Errorf("message = %q, want %q", msg, tt.want)
			}
			if wantSignal := limitSignal(tt.want); signal != wantSignal {
				t.Errorf("signal = %q, want %q", signal, wantSignal)
			}
		})
	}
}

func TestLocalStorageLimitsEvictEveryPodOverThemAtOnceWithoutThresholds(t *testing.T) {
	f := newFixture(t, nil, DiskLayout{}, func(c *Config) { c.LocalStorageCapacityIsolation = true })
	scratch, writer, fine := limitedPod("scratch"), limitedPod("writer"), limitedPod("fine")
	critical := limitedPod("static")
	critical.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	f.pods.pods = []*v1.Pod{scratch, writer, fine, critical}
	f.stats.summaries = []*statsapi.Summary{summary(nodeStats{fsAvail: 90 * mi, fsCap: 100 * mi},
		storageStats(scratch, map[string]int64{"scratch": 20 * mi}),
		storageStats(writer, nil, ctrStats("c", 0, 9*mi, 2*mi)),
		storageStats(fine, map[string]int64{"scratch": 1 * mi}, ctrStats("c", 0, 1*mi, 0)),
		storageStats(critical, map[string]int64{"scratch": 50 * mi}))}

	if got := names(f.syncAll(t)); got != "scratch writer" {
		t.Fatalf("evicted %q, want scratch and writer (the static pod is critical)", got)
	}
	want := []string{
		`uid-scratch grace=1 Evicted: Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". `,
		"uid-writer grace=1 Evicted: Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ",
	}
	if got := strings.Join(f.pods.evicted, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("evictions:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	wantEvents := []string{
		`pod/scratch Warning Evicted Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". `,
		"pod/writer Warning Evicted Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ",
	}
	if got := strings.Join(f.recorder.events, "\n"); got != strings.Join(wantEvents, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", got, strings.Join(wantEvents, "\n"))
	}
	if c := f.m.Pressure().Conditions(); c != nil {
		t.Errorf("conditions = %v, want none: limits are the pods' own", c)
	}
	// As the kubelet: no DisruptionTarget for a pod over its own limit,
	// and each eviction counted under its limit's pseudo-signal.
	for i, c := range f.pods.conditions {
		if c != nil {
			t.Errorf("eviction %d asked for condition %+v, want none", i, c)
		}
	}
	if got := strings.Join(f.metrics.evictions, " "); got != "emptydirfs.limit ephemeralpodfs.limit" {
		t.Errorf("evictions counted = %q, want emptydirfs.limit ephemeralpodfs.limit", got)
	}
	if len(f.gcLog) != 0 {
		t.Errorf("reclaimed %v for a pod's own limit", f.gcLog)
	}
}

func TestLocalStorageLimitsComeBeforeNodePressure(t *testing.T) {
	f := newFixture(t, []Threshold{nodefsHard(0.1)}, DiskLayout{}, func(c *Config) { c.LocalStorageCapacityIsolation = true })
	over, big := limitedPod("over"), pod("big", "", "", 0)
	f.pods.pods = []*v1.Pod{big, over}
	f.stats.summaries = []*statsapi.Summary{summary(nodeStats{fsAvail: 5 * mi, fsCap: 100 * mi},
		storageStats(big, nil, ctrStats("c", 0, 80*mi, 0)),
		storageStats(over, map[string]int64{"scratch": 11 * mi}))}
	if got := names(f.syncAll(t)); got != "over" {
		t.Fatalf("evicted %q, want only the pod over its limit", got)
	}
	if !f.m.Pressure().Has(v1.NodeDiskPressure) {
		t.Error("no DiskPressure: the conditions are published before the limits are enforced")
	}
	if len(f.gcLog) != 0 {
		t.Errorf("reclaimed %v in a pass that evicted for a limit", f.gcLog)
	}
	// The next pass, with the pod gone and new numbers, is the node's.
	f.pods.pods = []*v1.Pod{big}
	f.clock.Step(time.Second)
	f.stats.summaries = []*statsapi.Summary{summary(nodeStats{fsAvail: 5 * mi, fsCap: 100 * mi, at: metaTime(f.clock.Now())},
		storageStats(big, nil, ctrStats("c", 0, 80*mi, 0)))}
	if p := f.sync(t); p == nil || p.Name != "big" {
		t.Fatalf("evicted %v, want big for the node's pressure", p)
	}
}

func TestLocalStorageCapacityIsolationOff(t *testing.T) {
	f := newFixture(t, []Threshold{nodefsHard(0.1)}, DiskLayout{})
	over := limitedPod("over")
	f.pods.pods = []*v1.Pod{over}
	f.stats.summaries = []*statsapi.Summary{summary(nodeStats{fsAvail: 90 * mi, fsCap: 100 * mi},
		storageStats(over, map[string]int64{"scratch": 50 * mi}, ctrStats("c", 0, 50*mi, 0)))}
	if p := f.syncAll(t); len(p) != 0 {
		t.Errorf("evicted %s with localStorageCapacityIsolation off", names(p))
	}
}

func TestRunWaitsForEveryPodEvictedForItsLimits(t *testing.T) {
	f := newFixture(t, nil, DiskLayout{}, func(c *Config) { c.LocalStorageCapacityIsolation = true })
	a, b := limitedPod("a"), limitedPod("b")
	f.pods.pods = []*v1.Pod{a, b}
	f.stats.summaries = []*statsapi.Summary{summary(nodeStats{},
		storageStats(a, map[string]int64{"scratch": 20 * mi}), storageStats(b, map[string]int64{"scratch": 20 * mi}))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.m.Run(ctx) }()
	evictions := func() int {
		f.pods.mu.Lock()
		defer f.pods.mu.Unlock()
		return len(f.pods.evicted)
	}
	end := func(uid types.UID) {
		f.pods.mu.Lock()
		defer f.pods.mu.Unlock()
		f.pods.ended[uid] = true
	}
	waitFor(t, "both evictions", func() bool { return evictions() == 2 })
	waitFor(t, "the wait for the pods to end", f.clock.HasWaiters)
	end(a.UID)
	f.clock.Step(cleanupPoll)
	waitFor(t, "the wait for b", f.clock.HasWaiters)
	if evictions() != 2 {
		t.Fatal("looked again before every evicted pod ended")
	}
	end(b.UID)
	f.clock.Step(cleanupPoll)
	// Both ended: the next look comes at once (the fake still shows them).
	waitFor(t, "the look after both ended", func() bool { return evictions() == 4 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// limitSignal is the pseudo-signal the kubelet counts an eviction with
// message msg under.
func limitSignal(msg string) string {
	switch {
	case msg == "":
		return ""
	case strings.HasPrefix(msg, "Usage of EmptyDir"):
		return signalEmptyDirFsLimit
	case strings.HasPrefix(msg, "Pod ephemeral"):
		return signalEphemeralPodFsLimit
	}
	return signalEphemeralContainerFsLimit
}

// The pods are measured only when something uses their figures: a pod whose local storage
// limits are checked, or a threshold met (to rank them). A node without either is measured
// without its pods.
func TestPodsMeasuredOnlyWhenTheirFiguresAreUsed(t *testing.T) {
	f := newFixture(t, []Threshold{nodefsHard(0.1)}, DiskLayout{}, func(c *Config) { c.LocalStorageCapacityIsolation = true })
	plain, sized, limited := pod("plain", "", "", 0), pod("sized", "", "", 0), pod("limited", "", "", 0)
	sized.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: qty("10Mi")}}}}
	limited.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("10Mi")}
	calm := summary(nodeStats{fsAvail: 90 * mi, fsCap: 100 * mi}, podStats(plain, 0, ctrStats("c", 0, 1*mi, 0)))
	f.stats.summaries = []*statsapi.Summary{calm}

	f.pods.pods = []*v1.Pod{plain}
	if p := f.syncAll(t); len(p) != 0 {
		t.Fatalf("evicted %s from a calm node", names(p))
	}
	if f.stats.withPods != 0 || f.stats.nodeOnly != 1 {
		t.Errorf("a calm node without limits: %d summaries with the pods, %d without; want 0 and 1", f.stats.withPods, f.stats.nodeOnly)
	}
	for _, p := range []*v1.Pod{sized, limited} {
		f.pods.pods = []*v1.Pod{plain, p}
		before := f.stats.withPods
		f.syncAll(t)
		if f.stats.withPods != before+1 || f.stats.nodeOnly != 1 {
			t.Errorf("with %s: %d summaries with the pods (was %d), %d without; want one more with them", p.Name, f.stats.withPods, before, f.stats.nodeOnly)
		}
	}
	// Under pressure, with no pod limited.
	f = newFixture(t, []Threshold{nodefsHard(0.1)}, DiskLayout{}, func(c *Config) { c.LocalStorageCapacityIsolation = true })
	small, big := pod("small", "", "", 0), pod("big", "", "", 0)
	f.pods.pods = []*v1.Pod{small, big}
	f.stats.summaries = []*statsapi.Summary{summary(nodeStats{fsAvail: 5 * mi, fsCap: 100 * mi},
		podStats(small, 0, ctrStats("c", 0, 1*mi, 0)), podStats(big, 0, ctrStats("c", 0, 30*mi, 0)))}
	if p := f.sync(t); p == nil || p.Name != "big" {
		t.Fatalf("evicted %v under pressure, want big: the pods measured to rank them", p)
	}
	if f.stats.nodeOnly != 1 || f.stats.withPods == 0 {
		t.Errorf("under pressure: %d summaries without the pods, %d with; want 1 and some", f.stats.nodeOnly, f.stats.withPods)
	}
}
