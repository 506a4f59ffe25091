package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	agentruntime "github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/timeline"
	"github.com/nodeagent/nodeagent/test/harness"
)

// floorRound creates n sandboxes, each with one busybox container, straight through CRI
// with all n in flight at once (as an agent's per-pod workers would), then deletes them
// as both agents delete a pod (the container stopped with the pod's grace period, then
// the sandbox stopped, the container and the sandbox removed), all n at once: what the
// runtime alone needs, with no agent and no apiserver in the way. Each call is
// timed as the agent's timeline times its step (RunPodSandbox as sandbox, CreateContainer
// and StartContainer as createContainer:sleep and startContainer:sleep) for the round's
// breakdown. The image is present and the floor asks nothing about it (containerd resolves
// it in CreateContainer), so it has no pullImage step. sample, when set, reads the machine's
// CPU counters for the split of the CPU spent from the first call to the last container
// started (cpusplit.go).
func floorRound(ctx context.Context, rt runtimeapi.RuntimeServiceClient, runDir string, n int, sample func() (cpuSample, error)) (roundResult, error) {
	var res roundResult
	sandboxReady := make([]float64, n)
	started := make([]float64, n)
	ids := make([]string, n)
	containers := make([]string, n)
	pods := make([]podStart, n)
	errs := make(chan error, n)
	endCPU := cpuSpan(sample)
	begin := time.Now()
	// The same security both agents ask for the bench pod: the sandbox under the runtime's
	// default seccomp profile (both force it), the container with the kubelet's masked and
	// read-only paths. Without them the floor's pause processes and containers start with
	// less work than either agent's (no seccomp filter to load in the sandbox).
	pod := benchPod(0, harness.BusyboxImage, false)
	csc, err := agentruntime.ContainerSecurity(pod, &pod.Spec.Containers[0], agentruntime.SecurityOptions{}, agentruntime.ImageUser{})
	if err != nil {
		return res, fmt.Errorf("the bench container's security context: %w", err)
	}
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
				Linux: &runtimeapi.LinuxPodSandboxConfig{
					CgroupParent: harness.CgroupRoot + "/bench-floor/" + name,
					SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
						NamespaceOptions: csc.NamespaceOptions,
						Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
					},
				},
			}
			p := &pods[i]
			p.created = t0
			sb, err := timedCall(p, "sandbox", t0, func() (*runtimeapi.RunPodSandboxResponse, error) {
				return rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			})
			if err != nil {
				errs <- fmt.Errorf("run sandbox: %w", err)
				return
			}
			ids[i] = sb.PodSandboxId
			sandboxReady[i] = time.Since(t0).Seconds()
			c, err := timedCall(p, "createContainer:sleep", time.Now(), func() (*runtimeapi.CreateContainerResponse, error) {
				return rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
					PodSandboxId: sb.PodSandboxId, SandboxConfig: cfg,
					Config: &runtimeapi.ContainerConfig{
						Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
						Image:    &runtimeapi.ImageSpec{Image: harness.BusyboxImage},
						Command:  []string{"sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"},
						LogPath:  "sleep.log",
						Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: csc},
					},
				})
			})
			if err != nil {
				errs <- fmt.Errorf("create container: %w", err)
				return
			}
			containers[i] = c.ContainerId
			if _, err := timedCall(p, "startContainer:sleep", time.Now(), func() (*runtimeapi.StartContainerResponse, error) {
				return rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
			}); err != nil {
				errs <- fmt.Errorf("start container: %w", err)
				return
			}
			p.started = p.steps[len(p.steps)-1].End
			started[i] = p.started.Sub(t0).Seconds()
		}()
	}
	wg.Wait()
	close(errs)
	res.AllRunning = time.Since(begin).Seconds()
	res.CPUStart = endCPU()
	var firstErr error
	for err := range errs {
		firstErr = err
		break
	}
	res.SandboxReady, res.Started, res.Ready = dist(sandboxReady), dist(started), dist(started)
	res.StartedSeconds = sorted(started)
	res.Steps = breakdown(pods)
	endDelCPU := cpuSpan(sample)
	delStart := time.Now()
	var dwg sync.WaitGroup
	for i, id := range ids {
		if id == "" {
			continue
		}
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			if c := containers[i]; c != "" {
				_, _ = rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c, Timeout: floorGracePeriod})
			}
			_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			if c := containers[i]; c != "" {
				_, _ = rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c})
			}
			_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		}()
	}
	dwg.Wait()
	res.Deleted = time.Since(delStart).Seconds()
	res.CPUDelete = endDelCPU()
	return res, firstErr
}

// floorGracePeriod is the bench pods' grace period (the default's 30 s): their shell exits
// on SIGTERM, so the stop ends as soon as it has signalled.
const floorGracePeriod = 30

// timedCall makes one CRI call of a floor pod, begun at start, and records it in p's steps
// as the agent's timeline would.
func timedCall[R any](p *podStart, step string, start time.Time, call func() (R, error)) (R, error) {
	r, err := call()
	st := timeline.Step{Name: step, Start: start, End: time.Now(), Outcome: timeline.Done}
	if err != nil {
		st.Outcome, st.Error = timeline.Failed, err.Error()
	}
	p.steps = append(p.steps, st)
	return r, err
}
