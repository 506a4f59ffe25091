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

// imageVolume is one image volume's pull: spec is what containers mount,
// nil when fail says why it is not there.
type imageVolume struct {
	spec *runtimeapi.ImageSpec
	fail *imageFailure
}

// pullImageVolumes makes the pod's image volumes (spec.volumes[].image)
// present, once a pass and only once a container is about to start, as
// the kubelet pulls them before it starts any: each with its own pull
// policy, the pod's pull secrets and the pod's pull back-off, events
// going to the pod. A failure holds back only the containers that mount
// that volume.
func (p *pass) pullImageVolumes(ctx context.Context) map[string]imageVolume {
	if p.imageVolumes != nil {
		return p.imageVolumes
	}
	w := p.w
	p.imageVolumes = map[string]imageVolume{}
	if w.imageVolumesShown == nil {
		w.imageVolumesShown = map[string]status.Waiting{}
	}
	for _, vol := range p.pod.Spec.Volumes {
		if vol.Image == nil {
			continue
		}
		image, fail := p.pullImage(ctx, imageRequest{
			image: vol.Image.Reference, policy: vol.Image.PullPolicy, about: p.pod,
			step: "pullImageVolume:" + vol.Name, prev: w.imageVolumesShown[vol.Name],
		})
		if fail != nil {
			p.imageVolumes[vol.Name] = imageVolume{fail: fail}
			if ctx.Err() == nil {
				w.imageVolumesShown[vol.Name] = fail.waiting
			}
			continue
		}
		delete(w.imageVolumesShown, vol.Name)
		p.imageVolumes[vol.Name] = imageVolume{spec: &runtimeapi.ImageSpec{
			Image: image, UserSpecifiedImage: vol.Image.Reference, Annotations: p.pod.Annotations,
		}}
	}
	return p.imageVolumes
}

// imageVolumesFailure pulls the pod's image volumes if this pass has not
// (all of them, mounted or not, as the kubelet does before it starts any
// container) and returns why one the container mounts is not there, nil when all
// are. The container then waits with the failure's reason (the last
// failing volume's, as on a kubelet node) and gets a Failed event per
// failing volume.
func (p *pass) imageVolumesFailure(ctx context.Context, c *v1.Container, ref *v1.ObjectReference) *imageFailure {
	if !hasImageVolume(p.pod) {
		return nil
	}
	pulls := p.pullImageVolumes(ctx)
	var last *imageFailure
	for _, vm := range c.VolumeMounts {
		if iv, ok := pulls[vm.Name]; ok && iv.fail != nil {
			last = iv.fail
			p.failContainer(ctx, c, ref, iv.fail)
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
func (p *pass) observeImageVolumes(c *v1.Container, createErr error) {
	pod := p.pod
	m, ok := p.w.deps.metrics.(ImageVolumeMetrics)
	if !ok || !mountsImageVolume(pod, c) {
		return
	}
	volumes := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		if _, ok := p.imageVolumes[vm.Name]; ok {
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
