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
	// Ephemeral is true for an ephemeral container (a debug container
	// added through the pod's ephemeralcontainers subresource).
	Ephemeral bool
	// TargetID is the runtime ID of the container whose PID namespace an
	// ephemeral container joins (its targetContainerName), when it has one.
	TargetID string
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
	// Devices are the block volumes the container names in volumeDevices.
	Devices []*runtimeapi.Device
	// Security is the container's resolved security context
	// (ContainerSecurity), which carries a hostUsers: false pod's user
	// namespace; nil gives the runtime's defaults.
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
	image, restartCount := in.Image, in.RestartCount
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: c.Image},
		Command:     orElse(in.Command, c.Command),
		Args:        orElse(in.Args, c.Args),
		WorkingDir:  c.WorkingDir,
		Envs:        in.Env,
		Mounts:      in.Mounts,
		Devices:     in.Devices,
		Labels:      containerLabels(pod, c.Name),
		Annotations: containerAnnotations(pod, c, restartCount, in),
		LogPath:     ContainerLogPath(c.Name, restartCount),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux:       &runtimeapi.LinuxContainerConfig{SecurityContext: in.Security, Resources: in.Resources},
	}
	if cfg.Linux.SecurityContext == nil {
		ns := namespaceOptions(pod)
		if ns.UsernsOptions, _ = userNamespace(pod, nil); ns.UsernsOptions == nil {
			// A pod with hostUsers: false and no ContainerSecurity: a
			// user namespace of its own without mappings, which the
			// runtime refuses, rather than the node's.
			ns.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}
		}
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}
	}
	targetNamespace(cfg.Linux.SecurityContext, in.TargetID)
	return cfg
}

// targetNamespace puts a container that targets another into that one's
// PID namespace, unless the pod shares one namespace (or the host's)
// among all its containers already: then it sees every process anyway.
func targetNamespace(sc *runtimeapi.LinuxContainerSecurityContext, targetID string) {
	if targetID == "" || sc.NamespaceOptions == nil {
		return
	}
	if sc.NamespaceOptions.Pid == runtimeapi.NamespaceMode_CONTAINER {
		sc.NamespaceOptions.Pid = runtimeapi.NamespaceMode_TARGET
		sc.NamespaceOptions.TargetId = targetID
	}
}

func orElse(a, b []string) []string {
	if a != nil {
		return a
	}
	return b
}
