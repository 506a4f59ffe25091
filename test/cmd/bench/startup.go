package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/harness"
)

const benchNamespace = "bench"

// podTimes is when the watch first saw each milestone of one pod, from its creation request.
type podTimes struct {
	created, sandboxReady, started, ready time.Time
}

// roundResult is one side's figures for one round.
type roundResult struct {
	SandboxReady Dist    `json:"creationToPodReadyToStartContainers"`
	Started      Dist    `json:"creationToAllContainersStarted"`
	Ready        Dist    `json:"creationToReady"`
	AllRunning   float64 `json:"allRunningSeconds"`
	Deleted      float64 `json:"deleteAllGoneSeconds"`
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

// startupRound creates n pods at once, follows them with a watch until all are Ready, and
// then deletes them and waits until the apiserver and the runtime hold nothing of them.
// hold runs between the two, with the pods running (the footprint is measured there).
func startupRound(ctx context.Context, cs kubernetes.Interface, rt runtimeapi.RuntimeServiceClient, n int, probe bool, hold func() error) (roundResult, error) {
	var res roundResult
	tr := &tracker{times: map[string]*podTimes{}, want: n, allReady: make(chan struct{}), established: make(chan struct{})}
	for i := range n {
		tr.times[benchPod(i, "", false).Name] = &podTimes{}
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchErr := make(chan error, 1)
	go func() { watchErr <- tr.follow(watchCtx, cs) }()
	// The watch must be established before the first pod is created.
	select {
	case <-tr.established:
	case err := <-watchErr:
		return res, err
	}

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		pod := benchPod(i, harness.BusyboxImage, probe)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr.setCreated(pod.Name, time.Now())
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
		return res, fmt.Errorf("watching the pods: %w", err)
	case <-time.After(10 * time.Minute):
		return res, fmt.Errorf("only %d of %d pods ready after 10m", tr.readyCount(), n)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	res.AllRunning = time.Since(start).Seconds()
	stopWatch()
	<-watchErr
	var sb, st, rd []float64
	for _, pt := range tr.times {
		sb = append(sb, since(pt.created, pt.sandboxReady))
		st = append(st, since(pt.created, pt.started))
		rd = append(rd, since(pt.created, pt.ready))
	}
	res.SandboxReady, res.Started, res.Ready = dist(sb), dist(st), dist(rd)
	if hold != nil {
		if err := hold(); err != nil {
			return res, err
		}
	}
	delStart := time.Now()
	if err := cs.CoreV1().Pods(benchNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return res, fmt.Errorf("delete pods: %w", err)
	}
	if err := waitEmpty(ctx, cs, rt); err != nil {
		return res, err
	}
	res.Deleted = time.Since(delStart).Seconds()
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
			items := make([]any, len(list.Items))
			for i := range list.Items {
				items[i] = &list.Items[i]
			}
			return items, list.ResourceVersion, nil
		},
		watch: pods.Watch,
	}
	return follow(ctx, l, func(obj any, now time.Time) {
		if pod, ok := obj.(*corev1.Pod); ok {
			tr.observe(pod, now)
		}
	}, func() { tr.once.Do(func() { close(tr.established) }) })
}

// waitEmpty waits until no pod of the bench namespace exists, in the apiserver or as a
// sandbox in the runtime.
func waitEmpty(ctx context.Context, cs kubernetes.Interface, rt runtimeapi.RuntimeServiceClient) error {
	deadline := time.Now().Add(10 * time.Minute)
	filter := &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.namespace": benchNamespace}}
	for {
		pods, err := cs.CoreV1().Pods(benchNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 && len(sbs.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 10m %d pods and %d sandboxes remain", len(pods.Items), len(sbs.Items))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
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
