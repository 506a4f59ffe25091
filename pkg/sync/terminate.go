package sync

import (
	"context"
	"errors"
	"fmt"
	"os"
	gosync "sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// Grace periods, as the kubelet applies them.
const (
	defaultGracePeriod = 30
	// minGracePeriod gives even a force-deleted container a moment to
	// stop before it is killed.
	minGracePeriod = 2
)

// gracePeriod is how long the pod's containers get to stop: the
// deletion's grace period when it is being deleted, else its spec's.
func gracePeriod(pod *v1.Pod) int64 {
	g := int64(defaultGracePeriod)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		g = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.DeletionGracePeriodSeconds != nil {
		g = *pod.DeletionGracePeriodSeconds
	}
	return max(g, minGracePeriod)
}

// killPod stops all live containers, then every ready sandbox. App
// containers (and a running regular init container) stop first, in
// parallel; sidecars then stop one by one in reverse order, each with
// what is left of the grace period, so that they serve the app containers
// to the end.
func (w *Worker) killPod(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus, grace int64) error {
	var (
		wg   gosync.WaitGroup
		mu   gosync.Mutex
		errs []error
	)
	start := w.deps.clock.Now()
	ip := podIP(pod, observed)
	acted := false
	stop := func(c *runtime.ContainerStatus, grace int64) {
		spec, init := specContainer(pod, c.Name, c.Init)
		if spec != nil {
			w.deps.events.Eventf(containerRef(pod, spec, init), v1.EventTypeNormal, eventKilling, "Stopping container %s", c.Name)
		}
		hooked := spec
		if c.State != runtime.ContainerRunning {
			hooked = nil // no preStop in a container that is not running
		}
		if err := w.stopContainer(ctx, pod, hooked, c.Name, c.ID, ip, grace); err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("stop container %q: %w", c.Name, err))
			mu.Unlock()
		}
	}
	sidecars := map[string]*runtime.ContainerStatus{}
	// The containers stopped together: all but the last on goroutines of
	// their own, the last on this one (most pods have one container, and a
	// node deleting a hundred pods would otherwise hold a hundred more
	// stacks deep in gRPC while their stops last).
	var together []*runtime.ContainerStatus
	for _, c := range observed.Containers {
		if c.State != runtime.ContainerRunning && c.State != runtime.ContainerCreated && c.State != runtime.ContainerUnknown {
			continue
		}
		acted = true
		if spec, _ := specContainer(pod, c.Name, c.Init); spec != nil && c.Init && status.IsSidecar(spec) {
			if _, seen := sidecars[c.Name]; !seen {
				sidecars[c.Name] = c
				continue
			}
		}
		together = append(together, c)
	}
	for i, c := range together {
		if i == len(together)-1 {
			stop(c, grace)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop(c, grace)
		}()
	}
	wg.Wait()
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		if c := sidecars[pod.Spec.InitContainers[i].Name]; c != nil {
			left := grace - int64(w.deps.clock.Since(start)/time.Second)
			stop(c, max(left, minGracePeriod))
		}
	}
	for _, sb := range observed.Sandboxes {
		if !sb.Ready {
			continue
		}
		acted = true
		if err := w.timed(ctx, "stopSandbox", func(ctx context.Context) error { return w.deps.runtime.StopPodSandbox(ctx, sb.ID) }); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox: %w", err))
		}
	}
	if acted {
		w.acted()
	}
	return errors.Join(errs...)
}

// cleanup removes everything of a stopped pod: containers, sandboxes, the
// pod cgroup, the pod directory and its logs.
func (w *Worker) cleanup(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus) error {
	var errs []error
	for _, c := range observed.Containers {
		err := w.timed(ctx, "removeContainer:"+c.Name, func(ctx context.Context) error {
			return ignoreNotFound(w.deps.runtime.RemoveContainer(ctx, c.ID))
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("remove container %q: %w", c.Name, err))
		}
	}
	for _, sb := range observed.Sandboxes {
		if len(errs) > 0 {
			// The runtime would remove the containers left with the
			// sandbox, and fail as it just did, after forcing a stop.
			break
		}
		err := w.timed(ctx, "removeSandbox", func(ctx context.Context) error {
			return ignoreNotFound(w.deps.runtime.RemovePodSandbox(ctx, sb.ID))
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox: %w", err))
		}
	}
	if len(observed.Containers)+len(observed.Sandboxes) > 0 {
		// The cache is to drop the pod soon, but nothing after the cleanup
		// looks at it: the deletion is confirmed without waiting.
		w.deps.relister.RelistPod(w.uid)
	}
	// The pod cgroup goes last, once its sandbox (and the cgroups the
	// runtime made inside it) is gone; an ended pod's went already.
	if len(errs) == 0 && !w.state.released {
		if err := w.removeCgroup(ctx, pod); err != nil {
			errs = append(errs, err)
		}
	}
	if err := w.timed(ctx, "unmountVolumes", func(ctx context.Context) error { return w.deps.volumes.UnmountPod(ctx, pod.UID) }); err != nil {
		errs = append(errs, err)
	}
	if pod.Namespace != "" && pod.Name != "" {
		if err := os.RemoveAll(runtime.PodLogDir(w.settings.podOptions.PodLogsDir, pod)); err != nil {
			errs = append(errs, fmt.Errorf("remove pod logs: %w", err))
		}
	}
	if len(errs) == 0 {
		klog.FromContext(ctx).V(2).Info("Pod cleaned up")
	}
	return errors.Join(errs...)
}

// specContainer finds a container of the pod's spec by name and kind; an
// ephemeral container is found as a non-init one.
func specContainer(pod *v1.Pod, name string, init bool) (*v1.Container, bool) {
	list := pod.Spec.Containers
	if init {
		list = pod.Spec.InitContainers
	}
	for i := range list {
		if list[i].Name == name {
			return &list[i], init
		}
	}
	if !init {
		for i := range pod.Spec.EphemeralContainers {
			if ec := &pod.Spec.EphemeralContainers[i]; ec.Name == name {
				return (*v1.Container)(&ec.EphemeralContainerCommon), false
			}
		}
	}
	return nil, init
}

// isEphemeral says whether name is one of the pod's ephemeral containers.
func isEphemeral(pod *v1.Pod, name string) bool {
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return true
		}
	}
	return false
}

// ignoreNotFound makes the runtime's NotFound a success: what is to be
// removed is gone.
func ignoreNotFound(err error) error {
	if grpcstatus.Code(err) == codes.NotFound {
		return nil
	}
	return err
}

// removeCgroup removes the pod's cgroup; a busy one is retried by the
// next pass.
func (w *Worker) removeCgroup(ctx context.Context, pod *v1.Pod) error {
	cg := w.deps.cgroups
	if cg == nil {
		return nil
	}
	err := w.timed(ctx, "removePodCgroup", func(ctx context.Context) error { return cg.RemovePod(ctx, pod.UID) })
	if err != nil {
		return fmt.Errorf("remove pod cgroup: %w", err)
	}
	return nil
}

// finalize computes the ended pod's final status and, when write, hands
// it to the status manager at once; otherwise it waits for the pod's
// deletion to be confirmed with it.
func (w *Worker) finalize(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus, write bool) *v1.PodStatus {
	var st v1.PodStatus
	_ = w.timed(ctx, "finalStatus", func(context.Context) error {
		st = w.finalStatus(pod, observed)
		if write {
			w.deps.status.SetFinal(pod, st)
		}
		return nil
	})
	return &st
}

// confirmDeletion hands the deleted pod's final status to the status
// manager, whose write of it confirms the deletion to the apiserver.
func (w *Worker) confirmDeletion(ctx context.Context, pod *v1.Pod) error {
	return w.timed(ctx, "confirmDeletion", func(context.Context) error {
		if w.state.final == nil {
			return errors.New("no final status to confirm the deletion with")
		}
		w.deps.status.SetFinal(pod, *w.state.final)
		return nil
	})
}

// release tears down what an ended pod no longer needs while its
// containers stay for their logs: its cgroup, and its volumes with the
// pod directory.
func (w *Worker) release(ctx context.Context, pod *v1.Pod) error {
	if err := w.removeCgroup(ctx, pod); err != nil {
		return err
	}
	return w.releaseVolumes(ctx, pod)
}
