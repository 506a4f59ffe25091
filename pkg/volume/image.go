package volume

import (
	"context"

	v1 "k8s.io/api/core/v1"
)

const imagePluginName = "kubernetes.io/image"

// imagePlugin accepts image volumes (spec.volumes[].image). Their content
// is an OCI image the runtime mounts into each container itself, read-only
// (CRI Mount.image), so there is nothing to set up or tear down on the
// host: the pod worker pulls the image and names it in the container's
// mounts; the runtime unmounts it with the sandbox.
type imagePlugin struct{}

var _ plugin = imagePlugin{}

func (imagePlugin) name() string { return imagePluginName }

func (imagePlugin) canSupport(vol *v1.Volume) bool { return vol.Image != nil }

func (p imagePlugin) setUp(context.Context, *setUpRequest) (Mount, error) {
	return Mount{Image: true, ReadOnly: true, Plugin: p.name()}, nil
}

func (imagePlugin) tearDown(context.Context, string) error { return nil }
