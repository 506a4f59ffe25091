package sync

import (
	"context"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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
	env := make(map[string]string, len(in.Env))
	for _, kv := range in.Env {
		env[kv.Key] = string(kv.Value)
	}
	mounts, err := w.volumeMounts(ctx, pod, c, env)
	if err != nil {
		return in, err
	}
	in.Mounts = append(in.Mounts, mounts...)
	return in, nil
}
