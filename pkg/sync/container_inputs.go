package sync

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/qos"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// containerInputs gathers what one container's config needs beyond its
// spec: its resolved environment and command, its security context
// (checked against its image's user) and its mounts. An error is the
// container's CreateContainerConfigError (a missing configMap key, a
// root image under runAsNonRoot, a volume that is not mounted): the
// container is not created and the message says what is missing.
func (p *pass) containerInputs(ctx context.Context, c *v1.Container, init bool, image string, restartCount int32) (runtime.ContainerInputs, error) {
	w, pod := p.w, p.pod
	in := runtime.ContainerInputs{Init: init, Image: image, RestartCount: restartCount}
	env, err := runtime.ResolveEnv(ctx, pod, c, runtime.EnvInputs{
		Source:      w.deps.env,
		PodIPs:      p.podIPs,
		HostIPs:     w.settings.nodeIPs,
		Allocatable: w.allocatable(c),
		Warn: func(reason, msg string) {
			w.deps.events.Eventf(pod, v1.EventTypeWarning, reason, msg)
		},
	})
	if err != nil {
		return in, err
	}
	in.Env = env.Vars
	in.Resources = qos.ContainerResources(pod, c, w.settings.resources)
	vars := env.Map()
	in.Command, in.Args = runtime.ExpandCommand(c.Command, vars), runtime.ExpandCommand(c.Args, vars)

	user, err := w.imageUser(ctx, image)
	if err != nil {
		return in, err
	}
	if err := runtime.VerifyRunAsNonRoot(pod, c, user); err != nil {
		return in, err
	}
	security := w.settings.podOptions.Security
	security.UserNamespace = p.userns
	if in.Security, err = runtime.ContainerSecurity(pod, c, security, user); err != nil {
		return in, err
	}

	mounts, err := p.volumeMounts(ctx, c, vars)
	if err != nil {
		return in, err
	}
	in.Mounts = append(in.Mounts, mounts...)
	if in.Devices, err = p.volumeDevices(c); err != nil {
		return in, err
	}

	hosts, err := p.etcHostsMount(c)
	if err != nil {
		return in, err
	}
	in.Mounts = append(in.Mounts, hosts...)
	in.Mounts = append(in.Mounts, w.terminationMessageMount(ctx, pod, c)...)
	return in, nil
}

// imageUser reads the user the container's image runs as.
func (w *Worker) imageUser(ctx context.Context, image string) (runtime.ImageUser, error) {
	resp, err := w.deps.images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false)
	if err != nil {
		return runtime.ImageUser{}, fmt.Errorf("read the user of image %q: %w", image, err)
	}
	return runtime.ImageUserOf(resp.GetImage()), nil
}

// allocatable is the node's allocatable resources when the container has
// a downward API resource value to resolve.
func (w *Worker) allocatable(c *v1.Container) v1.ResourceList {
	if w.deps.allocatable == nil {
		return nil
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			return w.deps.allocatable()
		}
	}
	return nil
}
