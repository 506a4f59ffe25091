package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/objcache"
	podsync "github.com/nodeagent/nodeagent/pkg/sync"
	"github.com/nodeagent/nodeagent/pkg/userns"
	"github.com/nodeagent/nodeagent/pkg/volume"
)

// registeringVolumes is the volume manager as pod workers see it, telling
// the object cache which configMaps and secrets each pod references. A
// worker sets up a pod's volumes before it pulls an image or creates a
// container, again at every volume refresh, and tears them down when the
// pod ends or goes: so the pod's references are watched for as long as
// anything of it may read them.
type registeringVolumes struct {
	*volume.Manager
	objects *objcache.Cache
	// userns frees a pod's user namespace once its directory, which
	// records it, is gone.
	userns *userns.Allocator
}

var _ podsync.Volumes = registeringVolumes{}

// MountPod registers the pod's references, then sets up its volumes.
func (v registeringVolumes) MountPod(ctx context.Context, pod *v1.Pod) (volume.Mounts, error) {
	v.objects.Register(pod)
	return v.Manager.MountPod(ctx, pod)
}

// UnmountPod tears down the pod's volumes and releases its references,
// even when the tear-down failed: nothing of the pod reads them any more.
// Its user namespace is freed only once its directory is gone: until
// then the record there still holds it (for a restarted agent too).
func (v registeringVolumes) UnmountPod(ctx context.Context, uid types.UID) error {
	err := v.Manager.UnmountPod(ctx, uid)
	v.objects.Unregister(uid)
	if err == nil && v.userns != nil {
		err = v.userns.Release(uid)
	}
	return err
}
