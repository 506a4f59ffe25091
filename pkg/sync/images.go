package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodeagent/nodeagent/pkg/pullrecords"
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
// pass asks to look again when the pull may be retried.
func (p *pass) ensureImage(ctx context.Context, c *v1.Container, ref *v1.ObjectReference) (string, error) {
	policy := c.ImagePullPolicy
	if policy == "" {
		policy = v1.PullIfNotPresent
	}
	image, fail := p.pullImage(ctx, imageRequest{
		image: c.Image, policy: policy, about: ref, step: "pullImage:" + c.Name, prev: p.waiting(c.Name),
	})
	if fail != nil {
		p.failContainer(ctx, c, ref, fail)
		return "", fail.err
	}
	return image, nil
}

// failContainer holds a container back for an image that is not there:
// its waiting reason, and the kubelet's "Error: <reason>" event on it.
func (p *pass) failContainer(ctx context.Context, c *v1.Container, ref *v1.ObjectReference, fail *imageFailure) {
	p.wait(fail.retry)
	if ctx.Err() != nil {
		return // abandoned for the pod's deletion
	}
	p.setWaiting(c.Name, &fail.waiting)
	p.w.deps.events.Eventf(ref, v1.EventTypeWarning, eventFailed, "Error: %s", fail.waiting.Reason)
}

// imageRequest is one image a pod needs present: a container's, or an
// image volume's.
type imageRequest struct {
	image  string        // as written in the spec
	policy v1.PullPolicy // empty: defaulted as the API does
	// about is what the events refer to: the container, or the pod for
	// an image volume (as the kubelet does).
	about kruntime.Object
	step  string         // the name of the pod step the pull is timed as
	prev  status.Waiting // the last failure shown, for the back-off message
}

// imageFailure is why an image is not there: the waiting reason the
// containers that need it show, the error, and when to try again.
type imageFailure struct {
	waiting status.Waiting
	err     error
	retry   time.Duration
}

// pullImage makes an image present according to its pull policy, with the
// pod's pull secrets, unless the step holds its pull back (the pull
// back-off), and returns the reference the runtime knows it by. The
// Pulling, Pulled, BackOff and Failed events go to req.about; the pull's
// success or failure goes to the outcome, for the back-off.
func (p *pass) pullImage(ctx context.Context, req imageRequest) (string, *imageFailure) {
	w, about := p.w, req.about
	events := w.deps.events
	fail := func(reason, msg string, err error, retry time.Duration) (string, *imageFailure) {
		return "", &imageFailure{waiting: status.Waiting{Reason: reason, Message: msg}, err: err, retry: retry}
	}
	image, registry, err := runtime.ParseImage(req.image)
	if err != nil {
		msg := fmt.Sprintf("Failed to apply default image tag %q: %v", req.image, err)
		events.Eventf(about, v1.EventTypeWarning, reasonInvalidImageName, msg)
		return fail(reasonInvalidImageName, msg, err, syncErrorRetry)
	}
	policy := req.policy
	if policy == "" {
		policy = defaultPullPolicy(req.image)
	}
	spec := &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: req.image}
	// The pod's credentials are read once, when first needed: to judge
	// its use of a present image, or for the pull.
	var creds []runtime.PullCredential
	var credsRead bool
	podCreds := func() []runtime.PullCredential {
		if !credsRead {
			var err error
			if creds, err = w.pullCredentials(ctx, p.pod, registry); err != nil {
				klog.FromContext(ctx).V(2).Info("Reading image pull secrets failed", "err", err.Error())
			}
			credsRead = true
		}
		return creds
	}
	if policy != v1.PullAlways {
		resp, err := w.deps.images.ImageStatus(ctx, spec, false)
		if err != nil {
			return fail(reasonErrImagePull, err.Error(), err, time.Second)
		}
		if img := resp.GetImage(); img != nil {
			v := w.deps.pullRecords.MustPull(ctx, req.image, img.GetId(), recordedSecrets(podCreds()))
			if !v.Pull {
				w.imagePresent(ctx, req.step)
				events.Eventf(about, v1.EventTypeNormal, eventPulled, "Container image %q already present on machine and can be accessed by the pod", req.image)
				return imageRef(img, image), nil
			}
			// Present, but not known to be the pod's to use: it goes
			// through a pull with the pod's credentials, and under Never
			// it is as absent, so that its presence is not revealed.
			klog.FromContext(ctx).V(2).Info("Image present but the pod's credentials must be checked by a pull",
				"image", req.image, "imageRef", img.GetId(), "reason", v.Reason)
		}
		if policy == v1.PullNever {
			msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", req.image)
			events.Eventf(about, v1.EventTypeWarning, reasonErrImageNeverPull, msg)
			return fail(reasonErrImageNeverPull, msg, runtime.ErrImageNeverPull, syncErrorRetry)
		}
	}

	if wait := p.step.pullsHeld[req.image]; wait > 0 {
		msg := fmt.Sprintf("Back-off pulling image %q", req.image)
		events.Eventf(about, v1.EventTypeNormal, eventBackOff, msg)
		switch req.prev.Reason {
		case reasonErrImagePull:
			msg = fmt.Sprintf("%s: %s", msg, req.prev.Message)
		case reasonImagePullBackOff:
			msg = req.prev.Message
		}
		return fail(reasonImagePullBackOff, msg, runtime.ErrImagePullBack, wait)
	}

	auths := podCreds()
	// The intent goes down before the pull: should the agent die during
	// it, the image must not look preloaded at the next start.
	if err := w.deps.pullRecords.PullStarting(req.image); err != nil {
		msg := fmt.Sprintf("ErrImagePull: %v", err)
		events.Eventf(about, v1.EventTypeWarning, eventFailed, "Failed to pull image %q: %v", req.image, err)
		return fail(reasonErrImagePull, msg, fmt.Errorf("%w: %w", runtime.ErrImagePull, err), errImagePullShown)
	}
	var imageID string
	used := -1
	start := w.deps.clock.Now()
	events.Eventf(about, v1.EventTypeNormal, eventPulling, "Pulling image %q", req.image)
	var pulling time.Time
	err = w.timed(ctx, req.step, func(ctx context.Context) error {
		release, err := w.deps.pulls.slot(ctx)
		if err != nil {
			return err
		}
		defer release()
		pulling = w.deps.clock.Now()
		imageID, used, err = pullWithAuths(ctx, w.deps.images, spec, auths, p.sandboxCfg)
		return err
	})
	w.start.pulled(start, w.deps.clock.Now())
	if err != nil {
		w.deps.pullRecords.PullFailed(ctx, req.image)
		if ctx.Err() != nil {
			// Abandoned for the pod's deletion: not the image's fault.
			return fail(reasonErrImagePull, ctx.Err().Error(), ctx.Err(), time.Second)
		}
		p.out.pullsFailed = append(p.out.pullsFailed, pullKey(req.image))
		msg := fmt.Sprintf("ErrImagePull: %v", err)
		events.Eventf(about, v1.EventTypeWarning, eventFailed, "Failed to pull image %q: %v", req.image, err)
		return fail(reasonErrImagePull, msg, fmt.Errorf("%w: %w", runtime.ErrImagePull, err), errImagePullShown)
	}
	w.deps.pullRecords.Pulled(ctx, req.image, imageID, usedCredentials(auths, used))
	p.out.pullsDone = append(p.out.pullsDone, pullKey(req.image))
	events.Eventf(about, v1.EventTypeNormal, eventPulled, "Successfully pulled image %q in %v (%v including waiting)",
		req.image, w.deps.clock.Since(pulling), w.deps.clock.Since(start))
	if imageID == "" {
		imageID = image
	}
	return imageID, nil
}

// defaultPullPolicy is the API's default for an image without one:
// Always for the latest tag (written or implied) unless pinned by
// digest, IfNotPresent otherwise.
func defaultPullPolicy(image string) v1.PullPolicy {
	if strings.Contains(image, "@") {
		return v1.PullIfNotPresent
	}
	last := image[strings.LastIndex(image, "/")+1:]
	if _, tag, ok := strings.Cut(last, ":"); !ok || tag == "latest" {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}

// pullWithAuths pulls without credentials when there are none, else
// tries each in turn (and not without, as the kubelet does). It returns
// the index of the credential that pulled, -1 for none.
func pullWithAuths(ctx context.Context, images Images, spec *runtimeapi.ImageSpec, auths []runtime.PullCredential, sandboxCfg *runtimeapi.PodSandboxConfig) (string, int, error) {
	if len(auths) == 0 {
		id, err := images.PullImage(ctx, spec, nil, sandboxCfg)
		return id, -1, err
	}
	var errs []error
	for i, a := range auths {
		id, err := images.PullImage(ctx, spec, a.Auth, sandboxCfg)
		if err == nil {
			return id, i, nil
		}
		errs = append(errs, err)
	}
	return "", -1, errors.Join(errs...)
}

// pullCredentials reads the pod's image pull secrets and returns the
// credentials for registry. Missing secrets are skipped, as the kubelet
// does, so that a pull still gets tried anonymously.
func (w *Worker) pullCredentials(ctx context.Context, pod *v1.Pod, registry string) ([]runtime.PullCredential, error) {
	var secrets []*v1.Secret
	var errs []error
	for _, ref := range pod.Spec.ImagePullSecrets {
		s, err := w.deps.secrets.GetSecret(ctx, pod.Namespace, ref.Name)
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

// PullRecords remembers which credentials pulled each image and judges a
// pod's use of an image already present (pkg/pullrecords). Each
// PullStarting is followed by one Pulled or PullFailed for the image.
type PullRecords interface {
	// MustPull judges a pod asking for image, present as imageRef, with
	// pod its credentials for the image's registry.
	MustPull(ctx context.Context, image, imageRef string, pod []kubeletv1beta1.ImagePullSecret) pullrecords.Verdict
	// PullStarting records the intent to pull before the pull; an error
	// stops the pull.
	PullStarting(image string) error
	// Pulled records a successful pull and the credentials that made it.
	Pulled(ctx context.Context, image, imageRef string, used *kubeletv1beta1.ImagePullCredentials)
	// PullFailed ends a pull that failed or was abandoned.
	PullFailed(ctx context.Context, image string)
}

var _ PullRecords = (*pullrecords.Tracker)(nil)

// trustAll is PullRecords with the KubeletEnsureSecretPulledImages gate
// off: any present image is any pod's, and nothing is recorded.
type trustAll struct{}

func (trustAll) MustPull(context.Context, string, string, []kubeletv1beta1.ImagePullSecret) pullrecords.Verdict {
	return pullrecords.Verdict{Reason: pullrecords.ReasonPolicy}
}
func (trustAll) PullStarting(string) error                                                    { return nil }
func (trustAll) Pulled(context.Context, string, string, *kubeletv1beta1.ImagePullCredentials) {}
func (trustAll) PullFailed(context.Context, string)                                           {}

// recordedSecrets are a pod's credentials as pull records name them.
func recordedSecrets(creds []runtime.PullCredential) []kubeletv1beta1.ImagePullSecret {
	out := make([]kubeletv1beta1.ImagePullSecret, 0, len(creds))
	for _, c := range creds {
		out = append(out, kubeletv1beta1.ImagePullSecret{
			UID: string(c.UID), Namespace: c.Namespace, Name: c.Name, CredentialHash: c.Hash,
		})
	}
	return out
}

// usedCredentials is what a pull that succeeded with creds[i] (or
// without credentials, i < 0) is recorded as: that secret, or open to
// every pod on the node.
func usedCredentials(creds []runtime.PullCredential, i int) *kubeletv1beta1.ImagePullCredentials {
	if i < 0 || i >= len(creds) {
		return &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	}
	return &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: recordedSecrets(creds[i : i+1])}
}
