package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/harness"
)

// floorRound creates n sandboxes, each with one busybox container, straight through CRI
// with all n in flight at once (as an agent's per-pod workers would), then removes them:
// what the runtime alone needs, with no agent and no apiserver in the way.
func floorRound(ctx context.Context, rt runtimeapi.RuntimeServiceClient, runDir string, n int) (roundResult, error) {
	var res roundResult
	sandboxReady := make([]float64, n)
	started := make([]float64, n)
	ids := make([]string, n)
	errs := make(chan error, n)
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			name := fmt.Sprintf("floor-%03d", i)
			cfg := &runtimeapi.PodSandboxConfig{
				Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: benchNamespace, Uid: fmt.Sprintf("floor-%d-%d", begin.UnixNano(), i)},
				Hostname:     name,
				LogDirectory: fmt.Sprintf("%s/bench-logs/%s", runDir, name),
				Labels:       map[string]string{"io.kubernetes.pod.namespace": benchNamespace},
				Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: harness.CgroupRoot + "/bench-floor/" + name},
			}
			sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if err != nil {
				errs <- fmt.Errorf("run sandbox: %w", err)
				return
			}
			ids[i] = sb.PodSandboxId
			sandboxReady[i] = time.Since(t0).Seconds()
			c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
				PodSandboxId: sb.PodSandboxId, SandboxConfig: cfg,
				Config: &runtimeapi.ContainerConfig{
					Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
					Image:    &runtimeapi.ImageSpec{Image: harness.BusyboxImage},
					Command:  []string{"sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"},
					LogPath:  "sleep.log",
				},
			})
			if err != nil {
				errs <- fmt.Errorf("create container: %w", err)
				return
			}
			if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
				errs <- fmt.Errorf("start container: %w", err)
				return
			}
			started[i] = time.Since(t0).Seconds()
		}()
	}
	wg.Wait()
	close(errs)
	res.AllRunning = time.Since(begin).Seconds()
	var firstErr error
	for err := range errs {
		firstErr = err
		break
	}
	res.SandboxReady, res.Started, res.Ready = dist(sandboxReady), dist(started), dist(started)
	delStart := time.Now()
	var dwg sync.WaitGroup
	for _, id := range ids {
		if id == "" {
			continue
		}
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		}()
	}
	dwg.Wait()
	res.Deleted = time.Since(delStart).Seconds()
	return res, firstErr
}
