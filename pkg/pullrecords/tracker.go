// Package pullrecords keeps, on disk, which credentials pulled each image
// the agent pulled, and says whether a pod may use an image already
// present on the node without pulling it with its own credentials
// (imagePullCredentialsVerificationPolicy, the KubeletEnsureSecretPulledImages
// feature).
//
// Two kinds of file live under <root-dir>/image_manager, as on a kubelet
// node: an intent in "pulling" per image being pulled, written before the
// pull and removed after it; and a record in "pulled" per image ID,
// written after a successful pull, holding for each repository the image
// was asked for under the credentials that pulled it. An intent left by a
// crash still marks the image as pulled by the agent, so that a pull cut
// short never makes an image look preloaded.
package pullrecords

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	gosync "sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// ImageLister lists the images the runtime holds.
type ImageLister interface {
	ListImages(ctx context.Context) ([]*runtimeapi.Image, error)
}

// Config configures a Tracker.
type Config struct {
	// RootDir is the agent's root directory; the records live in
	// RootDir/image_manager. Required.
	RootDir string
	// Policy decides which present images need credentials. Required.
	Policy *Policy
	// Images turns the intents a crash left into records for the images
	// that made it onto the node; nil leaves the intents as they are.
	Images ImageLister
	// Now defaults to time.Now.
	Now func() time.Time
}

// Tracker records the agent's pulls and judges pods' use of present
// images. It is safe for concurrent use; every file access is serialized.
type Tracker struct {
	policy *Policy
	now    func() time.Time

	mu    gosync.Mutex
	store *store
	// pulling counts the pulls under way per image; the image's intent
	// file goes with the last of them.
	pulling map[string]int
}

// Open opens the records under cfg.RootDir, creating the directories,
// and turns the intents left by an earlier run into records for the
// images now present. Failing to read some records is logged, not fatal.
func Open(ctx context.Context, cfg Config) (*Tracker, error) {
	if cfg.RootDir == "" || cfg.Policy == nil {
		return nil, errors.New("pullrecords: RootDir and Policy are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s, err := openStore(cfg.RootDir)
	if err != nil {
		return nil, err
	}
	t := &Tracker{policy: cfg.Policy, now: cfg.Now, store: s, pulling: map[string]int{}}
	if cfg.Images != nil {
		t.recover(ctx, cfg.Images)
	}
	return t, nil
}

// recover settles the intents of pulls an earlier run did not see end:
// an image now present gets a record without credentials (the agent
// pulled it, with credentials unknown, so pods must verify), and its
// intent goes; an intent for an absent image stays, marking the image as
// the agent's should it appear.
func (t *Tracker) recover(ctx context.Context, lister ImageLister) {
	logger := klog.FromContext(ctx)
	intents, err := t.store.intents()
	if err != nil {
		logger.Error(err, "Reading image pull intents; going on with those read")
	}
	if len(intents) == 0 {
		return
	}
	images, err := lister.ListImages(ctx)
	if err != nil {
		logger.Error(err, "Listing images to settle image pull intents; leaving them")
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, image := range intents {
		for _, img := range images {
			if !namesImage(img, image) {
				continue
			}
			if err := t.mergeLocked(image, img.GetId(), nil); err != nil {
				logger.Error(err, "Recording an interrupted image pull", "image", image, "imageRef", img.GetId())
				continue
			}
			if err := t.store.deleteIntent(image); err != nil {
				logger.Error(err, "Removing an image pull intent", "image", image)
			}
		}
	}
}

// namesImage says whether the runtime's image carries image as one of its
// tags or digests, the name written or with the default tag applied.
func namesImage(img *runtimeapi.Image, image string) bool {
	names := append(slices.Clone(img.GetRepoTags()), img.GetRepoDigests()...)
	withTag := image
	if last := image[strings.LastIndex(image, "/")+1:]; !strings.Contains(image, "@") && !strings.Contains(last, ":") {
		withTag = image + ":latest"
	}
	return slices.Contains(names, image) || slices.Contains(names, withTag)
}

// MustPull judges a pod asking for image, present on the node as
// imageRef, with pod its credentials for the image's registry. A record
// that cannot be read asks for a pull, as does an empty imageRef.
func (t *Tracker) MustPull(ctx context.Context, image, imageRef string, pod []kubeletv1beta1.ImagePullSecret) Verdict {
	if imageRef == "" {
		return Verdict{Pull: true, Reason: ReasonNoRecord}
	}
	logger := klog.FromContext(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	rec, err := t.store.record(imageRef)
	if err != nil {
		logger.Error(err, "Reading the image's pull record; asking for a pull", "image", image, "imageRef", imageRef)
		return Verdict{Pull: true, Reason: ReasonNoRecord}
	}
	pulledByAgent := rec != nil || t.pulling[image] > 0
	if !pulledByAgent {
		if pulledByAgent, err = t.store.intentExists(image); err != nil {
			logger.Error(err, "Reading the image's pull intent; asking for a pull", "image", image)
			return Verdict{Pull: true, Reason: ReasonNoRecord}
		}
	}
	repo, ok := repository(image)
	if !ok {
		return Verdict{Pull: true, Reason: ReasonNoRecord}
	}
	var recorded *kubeletv1beta1.ImagePullCredentials
	if rec != nil {
		if c, ok := rec.CredentialMapping[repo]; ok {
			recorded = &c
		}
	}
	v := Decide(t.policy, image, pulledByAgent, recorded, pod)
	if v.Remember != nil {
		used := &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{*v.Remember}}
		if err := t.mergeLocked(image, imageRef, used); err != nil {
			logger.Error(err, "Remembering a matching pull credential", "image", image, "imageRef", imageRef)
		}
	}
	return v
}

// PullStarting writes the intent to pull image before the pull; every
// call is followed by one of Pulled or PullFailed. An error means the
// pull must not go ahead: the image would look preloaded after a crash.
func (t *Tracker) PullStarting(image string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.store.writeIntent(image); err != nil {
		return fmt.Errorf("record the intent to pull %q: %w", image, err)
	}
	t.pulling[image]++
	return nil
}

// Pulled records that image was pulled as imageRef with used: one pull
// secret, or NodePodsAccessible for a pull without credentials. When the
// record cannot be written the intent stays, so the image still counts
// as pulled by the agent, and the next start settles it.
func (t *Tracker) Pulled(ctx context.Context, image, imageRef string, used *kubeletv1beta1.ImagePullCredentials) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.mergeLocked(image, imageRef, used); err != nil {
		klog.FromContext(ctx).Error(err, "Recording an image pull", "image", image, "imageRef", imageRef)
		return
	}
	t.pullEndedLocked(ctx, image)
}

// PullFailed ends a pull that did not succeed.
func (t *Tracker) PullFailed(ctx context.Context, image string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pullEndedLocked(ctx, image)
}

func (t *Tracker) pullEndedLocked(ctx context.Context, image string) {
	if t.pulling[image] > 1 {
		t.pulling[image]--
		return
	}
	if err := t.store.deleteIntent(image); err != nil {
		klog.FromContext(ctx).Error(err, "Removing an image pull intent", "image", image)
		return
	}
	delete(t.pulling, image)
}

// Prune removes the records of images no longer on the node (present
// holds the IDs of those that are), except records written since until,
// a time taken before present was listed.
func (t *Tracker) Prune(ctx context.Context, present []string, until time.Time) {
	logger := klog.FromContext(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	recs, err := t.store.records()
	if err != nil {
		logger.Error(err, "Reading image pull records; pruning those read")
	}
	for _, rec := range recs {
		if !rec.LastUpdatedTime.Time.Before(until) || slices.Contains(present, rec.ImageRef) {
			continue
		}
		if err := t.store.deleteRecord(rec.ImageRef); err != nil {
			logger.Error(err, "Removing an image pull record", "imageRef", rec.ImageRef)
		}
	}
}

// mergeLocked adds used to imageRef's record under image's repository,
// creating the record, and writes it when anything changed. used nil
// only makes sure the record exists.
func (t *Tracker) mergeLocked(image, imageRef string, used *kubeletv1beta1.ImagePullCredentials) error {
	if imageRef == "" {
		return errors.New("no image ID to record")
	}
	repo, ok := repository(image)
	if !ok {
		return fmt.Errorf("image %q: not a reference ending in its tag and digest", image)
	}
	rec, err := t.store.record(imageRef)
	if err != nil {
		rec = nil // unreadable: written anew
	}
	changed := rec == nil
	if rec == nil {
		rec = &kubeletv1beta1.ImagePulledRecord{ImageRef: imageRef}
	}
	if mergeCredentials(rec, repo, used) {
		changed = true
	}
	if !changed {
		return nil
	}
	rec.LastUpdatedTime = metav1.NewTime(t.now())
	return t.store.writeRecord(rec)
}

// mergeCredentials adds used to rec's credentials for repo and says
// whether that changed them. Access for every pod supersedes secrets;
// secrets are kept one per namespace/name/UID, the newest hash winning,
// sorted.
func mergeCredentials(rec *kubeletv1beta1.ImagePulledRecord, repo string, used *kubeletv1beta1.ImagePullCredentials) bool {
	if used == nil || (!used.NodePodsAccessible && len(used.KubernetesSecrets) == 0) {
		return false
	}
	if rec.CredentialMapping == nil {
		rec.CredentialMapping = map[string]kubeletv1beta1.ImagePullCredentials{}
	}
	cur, found := rec.CredentialMapping[repo]
	switch {
	case found && cur.NodePodsAccessible:
		return false
	case used.NodePodsAccessible:
		rec.CredentialMapping[repo] = kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
		return true
	}
	changed := !found
	secrets := slices.Clone(cur.KubernetesSecrets)
	for _, s := range used.KubernetesSecrets {
		i := slices.IndexFunc(secrets, func(o kubeletv1beta1.ImagePullSecret) bool {
			return o.UID == s.UID && o.Namespace == s.Namespace && o.Name == s.Name
		})
		switch {
		case i < 0:
			secrets = append(secrets, s)
			changed = true
		case secrets[i].CredentialHash != s.CredentialHash:
			secrets[i].CredentialHash = s.CredentialHash
			changed = true
		}
	}
	if !changed {
		return false
	}
	slices.SortFunc(secrets, func(a, b kubeletv1beta1.ImagePullSecret) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.UID, b.UID)
	})
	cur.KubernetesSecrets = secrets
	rec.CredentialMapping[repo] = cur
	return true
}
