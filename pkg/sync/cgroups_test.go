package sync

import (
	"context"
	"errors"
	gosync "sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeCgroups records pod cgroups made and removed; removeErr fails
// that many removals first.
type fakeCgroups struct {
	mu        gosync.Mutex
	ensured   []types.UID
	settled   []types.UID
	removed   []types.UID
	removeErr int
	// ready are the pods whose cgroup is there as asked (PodReady); lost
	// makes every one missing.
	ready map[types.UID]bool
	lost  bool
}

func (f *fakeCgroups) PodReady(pod *v1.Pod) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return "/kubepods/burstable/pod" + string(pod.UID), f.ready[pod.UID] && !f.lost
}

func (f *fakeCgroups) SettlePod(_ context.Context, pod *v1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = append(f.settled, pod.UID)
	return nil
}

func (f *fakeCgroups) EnsurePod(_ context.Context, pod *v1.Pod) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured = append(f.ensured, pod.UID)
	if f.ready == nil {
		f.ready = map[types.UID]bool{}
	}
	f.ready[pod.UID] = true
	return "/kubepods/burstable/pod" + string(pod.UID), nil
}

func (f *fakeCgroups) RemovePod(_ context.Context, uid types.UID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.removeErr > 0 {
		f.removeErr--
		return errors.New("busy")
	}
	f.removed = append(f.removed, uid)
	return nil
}

// sandboxRecorder keeps the last sandbox config the worker asked for.
type sandboxRecorder struct {
	Runtime
	last *runtimeapi.PodSandboxConfig
}

func (r *sandboxRecorder) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	r.last = cfg
	return r.Runtime.RunPodSandbox(ctx, cfg, handler)
}

func TestWorkerPodCgroup(t *testing.T) {
	pod := basePod(withPolicy(v1.RestartPolicyNever))
	h := newHarness(t, pod)
	cg := &fakeCgroups{removeErr: 1}
	h.w.deps.cgroups = cg

	rec := &sandboxRecorder{Runtime: h.w.deps.runtime}
	h.w.deps.runtime = rec

	h.sync(pod, false)
	if len(cg.ensured) == 0 {
		t.Fatal("the pod's cgroup was not made before its sandbox")
	}
	if rec.last == nil {
		t.Fatal("no sandbox")
	}
	if got, want := rec.last.GetLinux().GetCgroupParent(), "/kubepods/burstable/pod"+string(pod.UID); got != want {
		t.Errorf("sandbox cgroup parent = %q, want %q", got, want)
	}
	if r := rec.last.GetLinux().GetResources(); r == nil || r.CpuShares != 2 {
		t.Errorf("sandbox resources = %v, want the pod's (BestEffort: 2 shares)", r)
	}
	h.exit("a", 0)
	h.exit("b", 0)
	h.sync(pod, false) // the pod ends: everything is stopped; the first removal finds the cgroup busy
	if h.status.final == nil {
		t.Fatal("no final status")
	}
	if len(cg.removed) != 0 {
		t.Fatalf("removed = %v after a busy removal", cg.removed)
	}
	ended := pod.DeepCopy()
	ended.Status.Phase = h.status.final.Phase
	h.sync(ended, false)
	if len(cg.removed) != 1 {
		t.Fatalf("the cgroup of an ended pod was not removed: %v", cg.removed)
	}

	deleted := ended.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	h.sync(deleted, false)
	if len(cg.removed) != 1 {
		t.Errorf("the cgroup was removed twice: %v", cg.removed)
	}
}

func TestWorkerRemovesCgroupOfDeletedPodAfterSandbox(t *testing.T) {
	pod := basePod()
	h := newHarness(t, pod)
	cg := &fakeCgroups{}
	h.w.deps.cgroups = cg
	h.sync(pod, false)
	deleted := pod.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	h.sync(deleted, false)
	if len(h.rt.Sandboxes) != 0 {
		t.Fatalf("sandboxes left: %d", len(h.rt.Sandboxes))
	}
	if len(cg.removed) != 1 || cg.removed[0] != pod.UID {
		t.Errorf("removed = %v, want the pod's cgroup", cg.removed)
	}
}

func TestContainerConfigCarriesResources(t *testing.T) {
	pod := basePod()
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Limits: v1.ResourceList{v1.ResourceMemory: mustQuantity("64Mi"), v1.ResourceCPU: mustQuantity("200m")}}
	h := newHarness(t, pod)
	h.w.settings.resources.CPUCFSQuota = true
	h.w.settings.resources.MemoryCapacity = 1 << 30
	p := &pass{w: h.w, pod: pod, sandboxCfg: &runtimeapi.PodSandboxConfig{}}
	in, err := p.containerInputs(context.Background(), &pod.Spec.Containers[0], false, "img", 0)
	if err != nil {
		t.Fatal(err)
	}
	r := in.Resources
	if r == nil || r.MemoryLimitInBytes != 64<<20 || r.CpuQuota != 20000 || r.CpuShares != 204 || r.OomScoreAdj != 999 {
		t.Errorf("resources = %v, want a 64Mi limit, quota 20000, shares 204 and a Burstable OOM score of 999", r)
	}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func TestResyncOfAPodWhoseCgroupIsThereMakesNoCgroupStep(t *testing.T) {
	pod := basePod()
	h := newHarness(t, pod)
	cg := &fakeCgroups{}
	h.w.deps.cgroups = cg
	h.sync(pod, false)
	h.sync(pod, false)
	if len(cg.ensured) != 1 {
		t.Fatalf("EnsurePod called %d times over a start and a resync, want once", len(cg.ensured))
	}
	// The cgroup gone (removed by hand): the next pass makes it again.
	cg.lost = true
	h.sync(pod, false)
	if len(cg.ensured) != 2 {
		t.Fatalf("a lost cgroup was not made again: EnsurePod called %d times", len(cg.ensured))
	}
}
