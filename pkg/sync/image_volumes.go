package sync

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"

	"github.com/nodeagent/nodeagent/pkg/status"
)

// imageVolumePulls is what the pod's image volumes (spec.volumes[].image)
// came to in this pass: the image each one mounts, or why it is not there.
type imageVolumePulls struct {
	pulled bool // this pass has pulled them
	byName map[string]imageVolume
	// shown is the failure each volume last showed, kept across passes:
	// the ImagePullBackOff message repeats the ErrImagePull one.
	shown map[string]status.Waiting
}

// imageVolume is one image volume's pull: spec is what containers mount,
// nil when fail says why it is not there.
type imageVolume struct {
	spec *runtimeapi.ImageSpec
	fail *imageFailure
}

// pullImageVolumes makes the pod's image volumes present, once a pass and
// only once a container is about to start, as the kubelet pulls them
// before it starts any: each with its own pull policy, the pod's pull
// secrets and the pod's pull back-off, events going to the pod. A
// failure holds back only the containers that mount that volume.
func (w *Worker) pullImageVolumes(ctx context.Context, pod *v1.Pod, sandboxCfg *runtimeapi.PodSandboxConfig) map[string]imageVolume {
	iv := &w.imageVolumes
	if iv.pulled {
		return iv.byName
	}
	iv.pulled, iv.byName = true, map[string]imageVolume{}
	if iv.shown == nil {
		iv.shown = map[string]status.Waiting{}
	}
	for _, vol := range pod.Spec.Volumes {
		if vol.Image == nil {
			continue
		}
		image, fail := w.pullImage(ctx, pod, imageRequest{
			image: vol.Image.Reference, policy: vol.Image.PullPolicy, about: pod,
			step: "pullImageVolume:" + vol.Name, prev: iv.shown[vol.Name],
		}, sandboxCfg)
		if fail != nil {
			iv.byName[vol.Name], iv.shown[vol.Name] = imageVolume{fail: fail}, fail.waiting
			continue
		}
		delete(iv.shown, vol.Name)
		iv.byName[vol.Name] = imageVolume{spec: &runtimeapi.ImageSpec{
			Image: image, UserSpecifiedImage: vol.Image.Reference, Annotations: pod.Annotations,
		}}
	}
	return iv.byName
}

// imageVolumesFailure pulls the pod's image volumes if this pass has not
// (all of them, mounted or not, as the kubelet does before it starts any
// container) and returns why one the container mounts is not there, nil when all
// are. The container then waits with the failure's reason (the last
// failing volume's, as on a kubelet node) and gets a Failed event per
// failing volume.
func (w *Worker) imageVolumesFailure(ctx context.Context, pod *v1.Pod, c *v1.Container, ref *v1.ObjectReference, sandboxCfg *runtimeapi.PodSandboxConfig) *imageFailure {
	if !hasImageVolume(pod) {
		return nil
	}
	pulls := w.pullImageVolumes(ctx, pod, sandboxCfg)
	var last *imageFailure
	for _, vm := range c.VolumeMounts {
		if iv, ok := pulls[vm.Name]; ok && iv.fail != nil {
			last = iv.fail
			w.failContainer(c, ref, iv.fail)
		}
	}
	return last
}

// hasImageVolume says whether the pod has an image volume.
func hasImageVolume(pod *v1.Pod) bool {
	for _, vol := range pod.Spec.Volumes {
		if vol.Image != nil {
			return true
		}
	}
	return false
}

// mountsImageVolume says whether the container mounts an image volume.
func mountsImageVolume(pod *v1.Pod, c *v1.Container) bool {
	for _, vm := range c.VolumeMounts {
		for _, vol := range pod.Spec.Volumes {
			if vol.Name == vm.Name && vol.Image != nil {
				return true
			}
		}
	}
	return false
}

// imageMount is the CRI mount of an image volume: the pulled image,
// read-only, optionally only its subPath (which the runtime resolves
// inside the image, so it must stay relative and below it).
func imageMount(vm *v1.VolumeMount, image *runtimeapi.ImageSpec, subPath string, prop runtimeapi.MountPropagation) (*runtimeapi.Mount, error) {
	if subPath != "" {
		if filepath.IsAbs(subPath) {
			return nil, fmt.Errorf("error SubPath `%s` must not be an absolute path", subPath)
		}
		for _, part := range strings.Split(subPath, "/") {
			if part == ".." {
				return nil, fmt.Errorf("unable to provision SubPath `%s`: must not contain '..'", subPath)
			}
		}
	}
	return &runtimeapi.Mount{
		ContainerPath:     vm.MountPath,
		Image:             image,
		ImageSubPath:      subPath,
		Readonly:          true,
		RecursiveReadOnly: vm.RecursiveReadOnly != nil && *vm.RecursiveReadOnly != v1.RecursiveReadOnlyDisabled,
		Propagation:       prop,
	}, nil
}

// ImageVolumeMetrics is told about image volume mounts, when the Metrics
// given to the Dispatcher has it (*metrics.Metrics does).
type ImageVolumeMetrics interface {
	// ObserveImageVolumes records a container created with image volumes:
	// how many it asked for, and how many of its mounts of them the
	// runtime made or failed to make.
	ObserveImageVolumes(requested, mounted, failed int)
}

// observeImageVolumes counts the image volumes of a container the runtime
// was asked to create, as the kubelet does: each volume once as
// requested, each of its mounts as mounted unless the runtime said that
// an image volume mount failed.
func (w *Worker) observeImageVolumes(pod *v1.Pod, c *v1.Container, createErr error) {
	m, ok := w.d.cfg.Metrics.(ImageVolumeMetrics)
	if !ok || !mountsImageVolume(pod, c) {
		return
	}
	volumes := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		if _, ok := w.imageVolumes.byName[vm.Name]; ok {
			volumes[vm.Name] = true
		}
	}
	mountFailed := createErr != nil && strings.Contains(createErr.Error(), crierrors.ErrImageVolumeMountFailed.Error())
	var mounted, failed int
	for _, vm := range c.VolumeMounts {
		switch {
		case !volumes[vm.Name]:
		case mountFailed:
			failed++
		default:
			mounted++
		}
	}
	m.ObserveImageVolumes(len(volumes), mounted, failed)
}
