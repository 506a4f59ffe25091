package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// Waiting reasons of image trouble, as the kubelet reports them.
const (
	reasonErrImagePull      = "ErrImagePull"
	reasonImagePullBackOff  = "ImagePullBackOff"
	reasonErrImageNeverPull = "ErrImageNeverPull"
	reasonInvalidImageName  = "InvalidImageName"
)

// errImagePullShown is how long ErrImagePull stays the waiting reason
// before the pass that turns it into ImagePullBackOff, so that users (and
// watchers) see both, as on a kubelet node.
const errImagePullShown = 2 * time.Second

// ensureImage makes the container's image present according to its pull
// policy and returns the reference to create the container from. On
// failure the container's waiting reason and the events are set, and the
// returned duration says when to try again.
func (w *Worker) ensureImage(ctx context.Context, pod *v1.Pod, c *v1.Container, ref *v1.ObjectReference, sandboxCfg *runtimeapi.PodSandboxConfig) (string, time.Duration, error) {
	fail := func(reason, msg string, err error, retry time.Duration) (string, time.Duration, error) {
		w.waiting[c.Name] = status.Waiting{Reason: reason, Message: msg}
		w.d.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, eventFailed, "Error: %s", reason)
		return "", retry, err
	}
	image, registry, err := runtime.ParseImage(c.Image)
	if err != nil {
		msg := fmt.Sprintf("Failed to apply default image tag %q: %v", c.Image, err)
		w.d.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, reasonInvalidImageName, msg)
		return fail(reasonInvalidImageName, msg, err, w.d.cfg.ResyncPeriod)
	}
	policy := c.ImagePullPolicy
	if policy == "" {
		policy = v1.PullIfNotPresent
	}
	spec := &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: c.Image}
	if policy != v1.PullAlways {
		resp, err := w.d.cfg.Images.ImageStatus(ctx, spec, false)
		if err != nil {
			return fail(reasonErrImagePull, err.Error(), err, time.Second)
		}
		if img := resp.GetImage(); img != nil {
			w.d.cfg.Recorder.Eventf(ref, v1.EventTypeNormal, eventPulled, "Container image %q already present on machine and can be accessed by the pod", c.Image)
			return imageRef(img, image), 0, nil
		}
		if policy == v1.PullNever {
			msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)
			w.d.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, reasonErrImageNeverPull, msg)
			return fail(reasonErrImageNeverPull, msg, runtime.ErrImageNeverPull, w.d.cfg.ResyncPeriod)
		}
	}

	key := "image/" + c.Image
	if wait := w.pulls.remaining(key, w.pulls.entries[key].lastOrZero(), 0); wait > 0 {
		prev := w.waiting[c.Name]
		msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
		w.d.cfg.Recorder.Eventf(ref, v1.EventTypeNormal, eventBackOff, msg)
		switch prev.Reason {
		case reasonErrImagePull:
			msg = fmt.Sprintf("%s: %s", msg, prev.Message)
		case reasonImagePullBackOff:
			msg = prev.Message
		}
		return fail(reasonImagePullBackOff, msg, runtime.ErrImagePullBack, wait)
	}

	auths, err := w.pullAuths(ctx, pod, registry)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Reading image pull secrets failed", "err", err.Error())
	}
	var imageID string
	start := w.d.cfg.Clock.Now()
	w.d.cfg.Recorder.Eventf(ref, v1.EventTypeNormal, eventPulling, "Pulling image %q", c.Image)
	var pulling time.Time
	err = w.step(ctx, "pullImage:"+c.Name, func() error {
		release, err := w.d.pullSlot(ctx)
		if err != nil {
			return err
		}
		defer release()
		pulling = w.d.cfg.Clock.Now()
		imageID, err = pullWithAuths(ctx, w.d.cfg.Images, spec, auths, sandboxCfg)
		return err
	})
	w.start.pulled(start, w.d.cfg.Clock.Now())
	if err != nil {
		w.pulls.next(key)
		msg := fmt.Sprintf("ErrImagePull: %v", err)
		w.d.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, eventFailed, "Failed to pull image %q: %v", c.Image, err)
		return fail(reasonErrImagePull, msg, fmt.Errorf("%w: %w", runtime.ErrImagePull, err), errImagePullShown)
	}
	w.pulls.reset(key)
	w.d.cfg.Recorder.Eventf(ref, v1.EventTypeNormal, eventPulled, "Successfully pulled image %q in %v (%v including waiting)",
		c.Image, w.d.cfg.Clock.Since(pulling), w.d.cfg.Clock.Since(start))
	if imageID == "" {
		imageID = image
	}
	return imageID, 0, nil
}

// pullWithAuths tries each credential in turn, then none.
func pullWithAuths(ctx context.Context, images Images, spec *runtimeapi.ImageSpec, auths []*runtimeapi.AuthConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	if len(auths) == 0 {
		return images.PullImage(ctx, spec, nil, sandboxCfg)
	}
	var errs []error
	for _, a := range auths {
		id, err := images.PullImage(ctx, spec, a, sandboxCfg)
		if err == nil {
			return id, nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// pullAuths reads the pod's image pull secrets and returns the
// credentials for registry. Missing secrets are skipped, as the kubelet
// does, so that a pull still gets tried anonymously.
func (w *Worker) pullAuths(ctx context.Context, pod *v1.Pod, registry string) ([]*runtimeapi.AuthConfig, error) {
	var secrets []*v1.Secret
	var errs []error
	for _, ref := range pod.Spec.ImagePullSecrets {
		s, err := w.d.cfg.Secrets.GetSecret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("secret %s/%s: %w", pod.Namespace, ref.Name, err))
			continue
		}
		secrets = append(secrets, s)
	}
	return runtime.PullAuths(registry, secrets), errors.Join(errs...)
}

// imageRef is what a container is created from: the image's ID when the
// runtime knows it, else the name.
func imageRef(img *runtimeapi.Image, name string) string {
	if img.GetId() != "" {
		return img.GetId()
	}
	return name
}

func (e *backoffEntry) lastOrZero() time.Time {
	if e == nil {
		return time.Time{}
	}
	return e.last
}
