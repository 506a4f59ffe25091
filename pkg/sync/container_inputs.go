package sync

import (
	"context"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/qos"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// containerInputs gathers what one container's config needs beyond its
// spec: its resolved environment and its mounts. An error is the
// container's CreateContainerConfigError (a missing configMap key, a
// volume that is not mounted): the container is not created and the
// message says what is missing.
func (w *Worker) containerInputs(ctx context.Context, pod *v1.Pod, c *v1.Container, init bool, image string, restartCount int32, sandboxCfg *runtimeapi.PodSandboxConfig) (runtime.ContainerInputs, error) {
	in := runtime.ContainerInputs{Init: init, Image: image, RestartCount: restartCount}
	in.Env = runtime.PlainEnv(c.Env)
	in.Resources = qos.ContainerResources(pod, c, w.d.cfg.Resources)
	return in, nil
}
