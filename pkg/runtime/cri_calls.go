package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
)

// The methods below have the signatures of k8s.io/cri-api's RuntimeService
// and ImageManagerService, so that consumers can declare small interfaces
// that both *Client and the cri-api testing fakes satisfy.

// RunPodSandbox creates and starts a pod sandbox and returns its ID.
func (c *Client) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: config, RuntimeHandler: runtimeHandler})
	if err != nil {
		return "", fmt.Errorf("CRI RunPodSandbox: %w", err)
	}
	if resp.GetPodSandboxId() == "" {
		return "", errors.New("CRI RunPodSandbox: runtime returned no sandbox ID")
	}
	return resp.GetPodSandboxId(), nil
}

// StopPodSandbox stops every process of a sandbox and tears its network down.
func (c *Client) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podSandboxID}); err != nil {
		return fmt.Errorf("CRI StopPodSandbox %s: %w", podSandboxID, err)
	}
	return nil
}

// RemovePodSandbox removes a sandbox and its containers.
func (c *Client) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podSandboxID}); err != nil {
		return fmt.Errorf("CRI RemovePodSandbox %s: %w", podSandboxID, err)
	}
	return nil
}

// PodSandboxStatus returns the status of one sandbox.
func (c *Client) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podSandboxID, Verbose: verbose})
	if err != nil {
		return nil, fmt.Errorf("CRI PodSandboxStatus %s: %w", podSandboxID, err)
	}
	return resp, nil
}

// ListPodSandbox lists sandboxes matching filter (nil: all).
func (c *Client) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
	if err != nil {
		return nil, c.explain("CRI ListPodSandbox", err)
	}
	return resp.GetItems(), nil
}

// CreateContainer creates a container in a sandbox and returns its ID.
func (c *Client) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podSandboxID, Config: config, SandboxConfig: sandboxConfig})
	if err != nil {
		return "", fmt.Errorf("CRI CreateContainer: %w", err)
	}
	if resp.GetContainerId() == "" {
		return "", errors.New("CRI CreateContainer: runtime returned no container ID")
	}
	return resp.GetContainerId(), nil
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, containerID string) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	if _, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID}); err != nil {
		return fmt.Errorf("CRI StartContainer %s: %w", containerID, err)
	}
	return nil
}

// StartedElsewhere says whether err, from StartContainer, is the runtime
// refusing a container that is no longer one to start: another start of
// it is under way, or has ended (containerd's words for both). An agent
// killed inside a start leaves the runtime to finish it, so its successor
// can find the container created and race that start; the outcome shows
// in the runtime's next answer, and is no failure of this start.
func StartedElsewhere(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "container is already in starting state") ||
		strings.Contains(msg, "container is in CONTAINER_RUNNING state") ||
		strings.Contains(msg, "container is in CONTAINER_EXITED state")
}

// StopContainer sends the stop signal, waits up to timeout seconds, then
// kills the container. The call itself may take that long, so its own
// deadline is the grace period plus the usual call timeout.
func (c *Client) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+secondsDuration(timeout))
	defer cancel()
	if _, err := c.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: containerID, Timeout: timeout}); err != nil {
		return fmt.Errorf("CRI StopContainer %s: %w", containerID, err)
	}
	return nil
}

// UpdateContainerResources applies new Linux resources to a running
// container's cgroup (an in-place resize).
func (c *Client) UpdateContainerResources(ctx context.Context, containerID string, r *runtimeapi.ContainerResources) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	req := &runtimeapi.UpdateContainerResourcesRequest{ContainerId: containerID, Linux: r.GetLinux(), Windows: r.GetWindows()}
	if _, err := c.rt.UpdateContainerResources(ctx, req); err != nil {
		return fmt.Errorf("CRI UpdateContainerResources %s: %w", containerID, err)
	}
	return nil
}

// RemoveContainer removes a container; a running one is killed first.
func (c *Client) RemoveContainer(ctx context.Context, containerID string) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	if _, err := c.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID}); err != nil {
		return fmt.Errorf("CRI RemoveContainer %s: %w", containerID, err)
	}
	return nil
}

// ListContainers lists containers matching filter (nil: all).
func (c *Client) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: filter})
	if err != nil {
		return nil, c.explain("CRI ListContainers", err)
	}
	return resp.GetContainers(), nil
}

// ContainerStatus returns the status of one container.
func (c *Client) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: verbose})
	if err != nil {
		return nil, fmt.Errorf("CRI ContainerStatus %s: %w", containerID, err)
	}
	return resp, nil
}

// UpdateRuntimeConfig hands the runtime the node's pod CIDR.
func (c *Client) UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	if _, err := c.rt.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: runtimeConfig}); err != nil {
		return fmt.Errorf("CRI UpdateRuntimeConfig: %w", err)
	}
	return nil
}

// ImageStatus returns the image's status; Image is nil when it is absent.
func (c *Client) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: image, Verbose: verbose})
	if err != nil {
		return nil, fmt.Errorf("CRI ImageStatus %s: %w", image.GetImage(), err)
	}
	return resp, nil
}

// PullImage pulls an image with optional credentials and returns its reference.
func (c *Client) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: image, Auth: auth, SandboxConfig: podSandboxConfig})
	if err != nil {
		return "", fmt.Errorf("CRI PullImage %s: %w", image.GetImage(), err)
	}
	return resp.GetImageRef(), nil
}

// ExecSync runs cmd in a container to completion and returns its output.
// A command that exits non-zero yields a utilexec.CodeExitError carrying
// the exit code. timeout is handed to the runtime, which kills the
// command when it passes; the call itself is given the usual call timeout
// on top, so the runtime has time to clean up. Zero means no timeout.
func (c *Client) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error) {
	callTimeout := c.timeout
	if timeout > 0 {
		callTimeout += timeout
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: containerID, Cmd: cmd, Timeout: int64(timeout / time.Second)})
	if err != nil {
		return nil, nil, fmt.Errorf("CRI ExecSync %s: %w", containerID, err)
	}
	if code := resp.GetExitCode(); code != 0 {
		return resp.GetStdout(), resp.GetStderr(), utilexec.CodeExitError{
			Err:  fmt.Errorf("command '%s' exited with %d: %s", strings.Join(cmd, " "), code, resp.GetStderr()),
			Code: int(code),
		}
	}
	return resp.GetStdout(), resp.GetStderr(), nil
}

// ReopenContainerLog asks the runtime to reopen a running container's log
// file, after the agent has moved the old one aside.
func (c *Client) ReopenContainerLog(ctx context.Context, containerID string) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	if _, err := c.rt.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: containerID}); err != nil {
		return fmt.Errorf("CRI ReopenContainerLog %s: %w", containerID, err)
	}
	return nil
}
