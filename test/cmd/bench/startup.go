package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/harness"
)

const benchNamespace = "bench"

// podTimes is when the watch first saw each milestone of one pod, from its creation request
// (with -pvc, from its claim's creation request, made just before the pod's).
type podTimes struct {
	created, scheduled, attached, sandboxReady, started, ready time.Time
}

// roundResult is one side's figures for one round.
type roundResult struct {
	SandboxReady Dist    `json:"creationToPodReadyToStartContainers"`
	Started      Dist    `json:"creationToAllContainersStarted"`
	Ready        Dist    `json:"creationToReady"`
	AllRunning   float64 `json:"allRunningSeconds"`
	// Deleted ends, with -pvc, only once no CSI mount is left on the node either.
	Deleted float64 `json:"deleteAllGoneSeconds"`

	// With -pvc: the scheduler binds a pod once its claim is provisioned and bound; the
	// attachment is the VolumeAttachment's; from there to the containers' start is the
	// agent's own share (it sees the attachment, stages, publishes, then makes the pod).
	Scheduled         *Dist `json:"creationToScheduled,omitempty"`
	Attached          *Dist `json:"creationToVolumeAttached,omitempty"`
	AttachedToStarted *Dist `json:"volumeAttachedToContainersStarted,omitempty"`
	// VolumesGone is from the deletion until no claim, PersistentVolume or
	// VolumeAttachment of the round is left.
	VolumesGone float64 `json:"deleteAllVolumesGoneSeconds,omitempty"`

	// Steps is where the start of the round's pods went, step by step: nodeagent's from the
	// pods' timelines, the floor's from its own timing of its CRI calls (steps.go). The
	// kubelet has no timeline to give.
	Steps *startSteps `json:"startSteps,omitempty"`

	// StartedSeconds is each pod's creation → containers started, sorted (the start-latency
	// CDF; a pod never seen started is -1).
	StartedSeconds []float64 `json:"startedSeconds,omitempty"`
	// CPUStart is the machine's CPU by component from the first create request until all
	// pods ran (the floor: from its first CRI call to its last container started).
	CPUStart *cpuSplit `json:"cpuDuringStart,omitempty"`
	// CPUDelete is the same split from the delete request until nothing of the pods is
	// left (the floor: from its first stop to its last sandbox removed).
	CPUDelete *cpuSplit `json:"cpuDuringDelete,omitempty"`
}

// workload is what a round creates.
type workload struct {
	n int
	// probe gives every pod an exec readiness probe run each second.
	probe bool
	// pvc gives every pod a claim of its own of the hostpath CSI driver (pvc.go).
	pvc bool
	// rootDir is the agent's --root-dir, where the CSI mounts are (pvc).
	rootDir string
	// timelines: the agent serves each pod's timeline (nodeagent), read once all pods are
	// running for the round's breakdown of their start (timelines.go).
	timelines bool
	// sample, when set, reads the machine's CPU counters for the split of the CPU spent
	// from the first create request until all pods run (cpusplit.go).
	sample func() (cpuSample, error)
}

// benchPod sleeps until told to stop, and stops at once on SIGTERM. With probe it has an
// exec readiness probe run every second.
func benchPod(i int, image string, probe bool) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%03d", i), Namespace: benchNamespace},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "sleep", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("4Mi"),
				}},
			}},
		},
	}
	if probe {
		pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
			PeriodSeconds: 1,
		}
	}
	return pod
}

// startupRound creates the workload's pods at once, follows them with a watch until all are
// Ready, and then deletes them (and their claims) and waits until the apiserver and the
// runtime hold nothing of them. hold runs between the two, with the pods running (the
// footprint is measured there); with w.timelines the pods' timelines are read before it.
func startupRound(ctx context.Context, cs kubernetes.Interface, rt runtimeapi.RuntimeServiceClient, w workload, hold func() error) (roundResult, error) {
	var res roundResult
	n := w.n
	tr := &tracker{times: map[string]*podTimes{}, want: n, allReady: make(chan struct{}), established: make(chan struct{})}
	for i := range n {
		tr.times[benchPod(i, "", false).Name] = &podTimes{}
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchErr := make(chan error, 2)
	go func() { watchErr <- tr.follow(watchCtx, cs) }()
	watches := 1
	at := newAttachTracker()
	if w.pvc {
		watches++
		go func() { watchErr <- at.follow(watchCtx, cs) }()
	} else {
		at.once.Do(func() { close(at.established) })
	}
	// The watches must be established before the first pod is created.
	for _, established := range []chan struct{}{tr.established, at.established} {
		select {
		case <-established:
		case err := <-watchErr:
			return res, err
		}
	}

	endCPU := cpuSpan(w.sample)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		pod := benchPod(i, harness.BusyboxImage, w.probe)
		if w.pvc {
			pod = withClaim(pod)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr.setCreated(pod.Name, time.Now())
			if w.pvc {
				if _, err := cs.CoreV1().PersistentVolumeClaims(benchNamespace).Create(ctx, benchClaim(i), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
			if _, err := cs.CoreV1().Pods(benchNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return res, fmt.Errorf("create pods: %w", err)
	}
	select {
	case <-tr.allReady:
	case err := <-watchErr:
		return res, fmt.Errorf("watching: %w", err)
	case <-time.After(10 * time.Minute):
		return res, fmt.Errorf("only %d of %d pods ready after 10m", tr.readyCount(), n)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	res.AllRunning = time.Since(start).Seconds()
	res.CPUStart = endCPU()
	stopWatch()
	for range watches {
		<-watchErr
	}
	pvs := map[string]bool{}
	if w.pvc {
		byClaim, err := claimVolumes(ctx, cs)
		if err != nil {
			return res, err
		}
		for claim, pv := range byClaim {
			pvs[pv] = true
			if pt := tr.times[claim]; pt != nil {
				pt.attached = at.attachedAt(pv)
			}
		}
	}
	var sb, st, rd, sc, att, attSt []float64
	for _, pt := range tr.times {
		sb = append(sb, since(pt.created, pt.sandboxReady))
		st = append(st, since(pt.created, pt.started))
		rd = append(rd, since(pt.created, pt.ready))
		sc = append(sc, since(pt.created, pt.scheduled))
		att = append(att, since(pt.created, pt.attached))
		attSt = append(attSt, since(pt.attached, pt.started))
	}
	res.SandboxReady, res.Started, res.Ready = dist(sb), dist(st), dist(rd)
	res.StartedSeconds = sorted(st)
	if w.pvc {
		res.Scheduled, res.Attached, res.AttachedToStarted = ptr.To(dist(sc)), ptr.To(dist(att)), ptr.To(dist(attSt))
	}
	if w.timelines {
		res.Steps = timelineSteps(ctx, cs, tr.times)
	}
	if hold != nil {
		if err := hold(); err != nil {
			return res, err
		}
	}
	endDelCPU := cpuSpan(w.sample)
	delStart := time.Now()
	if err := cs.CoreV1().Pods(benchNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return res, fmt.Errorf("delete pods: %w", err)
	}
	if w.pvc {
		// Deleted with the pods, as a namespace's deletion would: each claim goes once no
		// pod uses it (its protection finalizer), then its volume (reclaim policy Delete).
		if err := cs.CoreV1().PersistentVolumeClaims(benchNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return res, fmt.Errorf("delete claims: %w", err)
		}
	}
	if err := waitGone(ctx, func(ctx context.Context) (string, error) { return podsLeft(ctx, cs, rt, w) }); err != nil {
		return res, err
	}
	res.Deleted = time.Since(delStart).Seconds()
	res.CPUDelete = endDelCPU()
	if w.pvc {
		if err := waitGone(ctx, func(ctx context.Context) (string, error) { return volumesLeft(ctx, cs, pvs) }); err != nil {
			return res, err
		}
		res.VolumesGone = time.Since(delStart).Seconds()
	}
	return res, nil
}

// tracker records when each bench pod first reached each milestone, as a watch sees it.
type tracker struct {
	mu          sync.Mutex
	times       map[string]*podTimes
	want        int
	ready       int
	allReady    chan struct{} // closed when want pods are Ready
	established chan struct{} // closed once the first watch is established
	once        sync.Once
}

func (tr *tracker) setCreated(name string, t time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.times[name].created = t
}

func (tr *tracker) readyCount() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.ready
}

func (tr *tracker) observe(pod *corev1.Pod, now time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	pt := tr.times[pod.Name]
	if pt == nil {
		return
	}
	if pt.scheduled.IsZero() && pod.Spec.NodeName != "" {
		pt.scheduled = now
	}
	if pt.sandboxReady.IsZero() && condTrue(pod, corev1.PodReadyToStartContainers) {
		pt.sandboxReady = now
	}
	if pt.started.IsZero() && allStarted(pod) {
		pt.started = now
	}
	if pt.ready.IsZero() && condTrue(pod, corev1.PodReady) {
		pt.ready = now
		tr.ready++
		if tr.ready == tr.want {
			close(tr.allReady)
		}
	}
}

// follow watches the bench namespace's pods until ctx ends.
func (tr *tracker) follow(ctx context.Context, cs kubernetes.Interface) error {
	pods := cs.CoreV1().Pods(benchNamespace)
	l := lister{
		list: func(ctx context.Context, opts metav1.ListOptions) ([]any, string, error) {
			list, err := pods.List(ctx, opts)
			if err != nil {
				return nil, "", err
			}
			return pointers(list.Items), list.ResourceVersion, nil
		},
		watch: pods.Watch,
	}
	return follow(ctx, l, func(obj any, now time.Time) {
		if pod, ok := obj.(*corev1.Pod); ok {
			tr.observe(pod, now)
		}
	}, func() { tr.once.Do(func() { close(tr.established) }) })
}

// waitGone polls left every 100 ms until it reports nothing left ("") or 10 minutes have
// passed.
func waitGone(ctx context.Context, left func(context.Context) (string, error)) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		what, err := left(ctx)
		if err != nil {
			return err
		}
		if what == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 10m %s remain", what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// podsLeft describes what is left of the bench namespace's pods, in the apiserver, as
// sandboxes in the runtime, and with -pvc as CSI mounts on the node; "" when nothing is.
//
// It is asked every 100 ms while the pods go, so it asks little: one pod of the namespace
// (Limit 1; the apiserver counts the rest), and only once none is left the runtime's
// sandboxes. Listing every sandbox at each poll put the observer's own work into the
// deletion it timed on a saturated machine (containerd walks every sandbox for a list;
// the floor observes nothing); the apiserver's full lists came from its watch cache and
// cost it little (BENCHMARKS.md, 2026-11-29 evening).
func podsLeft(ctx context.Context, cs kubernetes.Interface, rt runtimeapi.RuntimeServiceClient, w workload) (string, error) {
	pods, err := cs.CoreV1().Pods(benchNamespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", err
	}
	if n := len(pods.Items); n > 0 {
		if r := pods.RemainingItemCount; r != nil {
			n += int(*r)
		}
		return fmt.Sprintf("%d pods", n), nil
	}
	filter := &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.namespace": benchNamespace}}
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
	if err != nil {
		return "", err
	}
	mounts := 0
	if w.pvc {
		if mounts, err = csiMountsLeft(w.rootDir); err != nil {
			return "", err
		}
	}
	if len(sbs.Items)+mounts == 0 {
		return "", nil
	}
	return fmt.Sprintf("%d sandboxes and %d CSI mounts", len(sbs.Items), mounts), nil
}

func condTrue(pod *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func allStarted(pod *corev1.Pod) bool {
	if len(pod.Status.ContainerStatuses) != len(pod.Spec.Containers) {
		return false
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.State.Running == nil {
			return false
		}
	}
	return true
}

func since(from, to time.Time) float64 {
	if from.IsZero() || to.IsZero() {
		return -1 // never seen: shows as a negative figure rather than vanishing
	}
	return to.Sub(from).Seconds()
}

// sorted is a sorted copy of xs.
func sorted(xs []float64) []float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s
}
