package runtime

import (
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerLogPath is a container's log file relative to its pod's log
// directory: <container>/<restartCount>.log, as the kubelet lays it out.
func ContainerLogPath(name string, restartCount int32) string {
	return filepath.Join(name, fmt.Sprintf("%d.log", restartCount))
}

// ContainerInputs is what a container's config is made from beyond the
// pod spec: what the agent resolved or prepared for it.
type ContainerInputs struct {
	// Init is true for an init container (restartable ones included).
	Init bool
	// Image is the reference the image was resolved to.
	Image string
	// RestartCount becomes the attempt and is recorded in an annotation
	// so that it survives an agent restart.
	RestartCount int32
	// Env is the container's resolved environment, in order.
	Env []*runtimeapi.KeyValue
	// Mounts are the container's binds: volumes, /etc/hosts, the
	// termination message file.
	Mounts []*runtimeapi.Mount
	// Security is the container's resolved security context
	// (ContainerSecurity); nil gives the runtime's defaults.
	Security *runtimeapi.LinuxContainerSecurityContext
	// Command and Args replace the spec's when set: they are the spec's
	// with $(VAR) references expanded (ExpandCommand).
	Command, Args []string
	// Resources are the container's cgroup limits (cpu, memory, huge
	// pages) and OOM score; nil leaves them to the runtime's defaults.
	Resources *runtimeapi.LinuxContainerResources
}

// ContainerConfig translates one container of a pod into the config the
// runtime creates it from.
func ContainerConfig(pod *v1.Pod, c *v1.Container, in ContainerInputs) *runtimeapi.ContainerConfig {
	init, image, restartCount := in.Init, in.Image, in.RestartCount
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: c.Image},
		Command:     orElse(in.Command, c.Command),
		Args:        orElse(in.Args, c.Args),
		WorkingDir:  c.WorkingDir,
		Envs:        in.Env,
		Mounts:      in.Mounts,
		Labels:      containerLabels(pod, c.Name),
		Annotations: containerAnnotations(pod, c, restartCount, init),
		LogPath:     ContainerLogPath(c.Name, restartCount),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux:       &runtimeapi.LinuxContainerConfig{SecurityContext: in.Security, Resources: in.Resources},
	}
	if cfg.Linux.SecurityContext == nil {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: namespaceOptions(pod)}
	}
	return cfg
}

func orElse(a, b []string) []string {
	if a != nil {
		return a
	}
	return b
}
