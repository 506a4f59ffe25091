package main

import (
	"context"
	"fmt"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodeagent/nodeagent/pkg/pullrecords"
	podsync "github.com/nodeagent/nodeagent/pkg/sync"
)

// ensureSecretPulledImages is the gate of image pull credential checks;
// beta and on by default in 1.37.
const ensureSecretPulledImages = "KubeletEnsureSecretPulledImages"

// pullPolicy checks imagePullCredentialsVerificationPolicy and
// preloadedImagesVerificationAllowlist as the kubelet does: with the gate
// on, a known policy and an allowlist only for NeverVerifyAllowlistedImages;
// with it off, neither set. It returns nil with the gate off.
func pullPolicy(kc *kubeletv1beta1.KubeletConfiguration) (*pullrecords.Policy, error) {
	if !gateEnabled(kc, ensureSecretPulledImages, true) {
		if kc.ImagePullCredentialsVerificationPolicy != "" || len(kc.PreloadedImagesVerificationAllowlist) > 0 {
			return nil, fmt.Errorf("must not be set while the %s feature gate is off", ensureSecretPulledImages)
		}
		return nil, nil
	}
	return pullrecords.NewPolicy(kc.ImagePullCredentialsVerificationPolicy, kc.PreloadedImagesVerificationAllowlist)
}

// newPullRecords opens the image pull records under the root dir; nil
// with the gate off, so that every pod may use every present image.
func newPullRecords(ctx context.Context, cfg *agentConfig, images pullrecords.ImageLister) (podsync.PullRecords, error) {
	policy, err := pullPolicy(cfg.kubelet)
	if err != nil || policy == nil {
		return nil, err
	}
	tracker, err := pullrecords.Open(ctx, pullrecords.Config{RootDir: cfg.rootDir, Policy: policy, Images: images})
	if err != nil {
		return nil, err
	}
	return tracker, nil
}
