package sync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/expansion"
	"github.com/nodeagent/nodeagent/pkg/volume"
)

// eventFailedMount is the kubelet's reason for a volume that could not be
// set up.
const eventFailedMount = "FailedMount"

// Retry delays of a pod whose volumes failed, doubling as the kubelet's
// volume operations back off.
const (
	mountRetryInitial = 500 * time.Millisecond
	mountRetryMax     = 2*time.Minute + 2*time.Second
)

// podVolumes is a worker's view of its pod's volumes.
type podVolumes struct {
	mounts  volume.Mounts     // what containers bind, by volume name
	due     time.Time         // when contents are next brought up to date
	labels  map[string]string // the metadata downward API files were written from
	annots  map[string]string
	retry   time.Duration // the delay after the next failure
	retryAt time.Time     // no new attempt before this, after a failure
}

// mountVolumes sets up the pod's volumes, or brings their contents up to
// date when that is due: every VolumeRefreshPeriod, when a token is due
// for refresh, and when labels or annotations (downward API) changed. It
// returns how long until the pod should be looked at again, and an error
// when some volume the pod needs is not set up, in which case nothing of
// the pod may be created yet. A volume that was set up before and fails
// to refresh keeps its old contents and does not hold the pod back.
func (w *Worker) mountVolumes(ctx context.Context, pod *v1.Pod) (time.Duration, error) {
	pv := &w.volumes
	now := w.deps.clock.Now()
	fresh := pv.mounts != nil && now.Before(pv.due) && maps.Equal(pv.labels, pod.Labels) && maps.Equal(pv.annots, pod.Annotations)
	if fresh {
		return pv.due.Sub(now), nil
	}
	if now.Before(pv.retryAt) {
		if pv.mounts != nil && complete(pod, pv.mounts) {
			return pv.retryAt.Sub(now), nil
		}
		return pv.retryAt.Sub(now), errVolumesPending
	}
	var mounts volume.Mounts
	err := w.timed(ctx, "volumes", func(ctx context.Context) error {
		var err error
		mounts, err = w.deps.volumes.MountPod(ctx, pod)
		return err
	})
	for name, m := range pv.mounts {
		if _, ok := mounts[name]; !ok && mounts != nil {
			mounts[name] = m
		}
	}
	if mounts != nil {
		pv.mounts = mounts
	}
	if err != nil {
		w.mountFailed(pod, err)
		if pv.retry == 0 {
			pv.retry = mountRetryInitial
		}
		wait := pv.retry
		pv.retryAt, pv.retry = now.Add(wait), min(2*pv.retry, mountRetryMax)
		if pv.mounts != nil && complete(pod, pv.mounts) {
			return wait, nil
		}
		return wait, err
	}
	pv.retry, pv.retryAt = 0, time.Time{}
	pv.labels, pv.annots = maps.Clone(pod.Labels), maps.Clone(pod.Annotations)
	pv.due = now.Add(w.settings.volumeRefresh)
	if t, ok := w.deps.volumes.NextRefresh(pod.UID); ok && t.Before(pv.due) {
		pv.due = t
	}
	return max(pv.due.Sub(now), 100*time.Millisecond), nil
}

// errVolumesPending holds a pod back while its volumes wait for a retry.
var errVolumesPending = errors.New("volumes are not set up yet")

// mountFailed records a FailedMount event for each volume that failed.
func (w *Worker) mountFailed(pod *v1.Pod, err error) {
	var failed []*volume.MountError
	collectMountErrors(err, &failed)
	if len(failed) == 0 {
		w.deps.events.Eventf(pod, v1.EventTypeWarning, eventFailedMount, "Unable to mount volumes for pod %s: %v", podDesc(pod), err)
		return
	}
	for _, me := range failed {
		w.deps.events.Eventf(pod, v1.EventTypeWarning, eventFailedMount, "%s", me.Error())
	}
}

func collectMountErrors(err error, out *[]*volume.MountError) {
	var me *volume.MountError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			collectMountErrors(e, out)
		}
		return
	}
	if errors.As(err, &me) {
		*out = append(*out, me)
	}
}

// complete says whether every volume of the pod has a mount.
func complete(pod *v1.Pod, mounts volume.Mounts) bool {
	for _, v := range pod.Spec.Volumes {
		if _, ok := mounts[v.Name]; !ok {
			return false
		}
	}
	return true
}

// releaseVolumes tears down the volumes of a pod whose containers have all
// stopped. Its directory goes with them.
func (w *Worker) releaseVolumes(ctx context.Context, pod *v1.Pod) error {
	if err := w.timed(ctx, "unmountVolumes", func(ctx context.Context) error { return w.deps.volumes.UnmountPod(ctx, pod.UID) }); err != nil {
		return err
	}
	w.volumes = podVolumes{}
	return nil
}

// volumeMounts turns the container's volumeMounts into binds, preparing
// subPaths beneath their volumes. env expands subPathExpr. An error is the
// container's CreateContainerConfigError.
func (p *pass) volumeMounts(ctx context.Context, c *v1.Container, env map[string]string) ([]*runtimeapi.Mount, error) {
	w, pod := p.w, p.pod
	var out []*runtimeapi.Mount
	for i, vm := range c.VolumeMounts {
		m, ok := w.volumes.mounts[vm.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		host := m.HostPath
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			var err error
			if sub, err = expandSubPathExpr(vm.SubPathExpr, env); err != nil {
				return nil, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q: %w", vm.Name, c.Name, err)
			}
		}
		prop, err := propagation(vm.MountPropagation, c)
		if err != nil {
			return nil, err
		}
		if m.Block {
			return nil, fmt.Errorf("volume %q is a block volume: container %q must name it in volumeDevices, not volumeMounts", vm.Name, c.Name)
		}
		if m.Image {
			iv := p.imageVolumes[vm.Name]
			if iv.spec == nil {
				return nil, fmt.Errorf("image volume %q of container %q is not pulled", vm.Name, c.Name)
			}
			mnt, err := imageMount(&c.VolumeMounts[i], iv.spec, sub, prop)
			if err != nil {
				return nil, err
			}
			out = append(out, mnt)
			continue
		}
		if sub != "" {
			p, err := w.deps.volumes.PrepareSubPath(ctx, volume.SubPathRequest{
				PodUID: pod.UID, Volume: vm.Name, VolumePath: m.HostPath,
				Container: c.Name, MountIndex: i, SubPath: sub,
			})
			if err != nil {
				return nil, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q: %w", vm.Name, c.Name, err)
			}
			host = p
		}
		readOnly := vm.ReadOnly || m.ReadOnly
		out = append(out, &runtimeapi.Mount{
			ContainerPath:     vm.MountPath,
			HostPath:          host,
			Readonly:          readOnly,
			RecursiveReadOnly: readOnly && vm.RecursiveReadOnly != nil && *vm.RecursiveReadOnly != v1.RecursiveReadOnlyDisabled,
			Propagation:       prop,
		})
	}
	return out, nil
}

// volumeDevices turns the container's volumeDevices into the block devices
// the runtime makes in it.
func (p *pass) volumeDevices(c *v1.Container) ([]*runtimeapi.Device, error) {
	var out []*runtimeapi.Device
	for _, vd := range c.VolumeDevices {
		m, ok := p.w.volumes.mounts[vd.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to map into container %q", vd.Name, c.Name)
		}
		if !m.Block {
			return nil, fmt.Errorf("volume %q is not a block volume: container %q must name it in volumeMounts, not volumeDevices", vd.Name, c.Name)
		}
		out = append(out, &runtimeapi.Device{ContainerPath: vd.DevicePath, HostPath: m.HostPath, Permissions: "mrw"})
	}
	return out, nil
}

// propagation maps a volumeMount's mountPropagation to the runtime's;
// Bidirectional is for privileged containers only.
func propagation(mode *v1.MountPropagationMode, c *v1.Container) (runtimeapi.MountPropagation, error) {
	if mode == nil {
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE, nil
	}
	switch *mode {
	case v1.MountPropagationNone:
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE, nil
	case v1.MountPropagationHostToContainer:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, nil
	case v1.MountPropagationBidirectional:
		if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
			return 0, fmt.Errorf("bidirectional mount propagation is available only to privileged containers")
		}
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, nil
	}
	return 0, fmt.Errorf("invalid mount propagation mode %q", *mode)
}

// expandSubPathExpr expands $(VAR) references from the container's
// environment. Unlike in a command, a variable that is unset or empty is
// an error, as with the kubelet: "logs/$(POD_NAME)" must become neither
// "logs/", which every pod would share, nor a directory literally named
// "$(POD_NAME)". The result must stay a relative path inside the volume.
func expandSubPathExpr(expr string, env map[string]string) (string, error) {
	var missing []string
	out := expansion.Expand(expr, func(name string) (string, bool) {
		v := env[name]
		if v == "" && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
		return v, true
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(missing, ", "))
	}
	if filepath.IsAbs(out) {
		return "", fmt.Errorf("subPathExpr %q expands to the absolute path %q", expr, out)
	}
	for _, part := range strings.Split(out, "/") {
		if part == ".." {
			return "", fmt.Errorf("subPathExpr %q expands to %q, which must not contain '..'", expr, out)
		}
	}
	return out, nil
}
