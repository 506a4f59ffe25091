package pullrecords

import (
	"fmt"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Policy is imagePullCredentialsVerificationPolicy with its allowlist:
// which images present on the node a pod may use without showing
// credentials that were recorded pulling them.
type Policy struct {
	mode kubeletv1beta1.ImagePullCredentialsVerificationPolicy
	// exact and prefixes are preloadedImagesVerificationAllowlist:
	// repositories named whole, and the "registry/path/" of patterns
	// ending in "/*".
	exact    map[string]bool
	prefixes []string
}

// NewPolicy checks the policy and its allowlist as the kubelet's
// configuration validation does: the allowlist only goes with
// NeverVerifyAllowlistedImages, and holds repositories without a tag or
// digest, or prefixes ending in "/*".
func NewPolicy(mode kubeletv1beta1.ImagePullCredentialsVerificationPolicy, allowlist []string) (*Policy, error) {
	switch mode {
	case kubeletv1beta1.NeverVerify, kubeletv1beta1.NeverVerifyPreloadedImages,
		kubeletv1beta1.NeverVerifyAllowlistedImages, kubeletv1beta1.AlwaysVerify:
	default:
		return nil, fmt.Errorf("unknown policy %q: want %s, %s, %s or %s", mode, kubeletv1beta1.NeverVerify,
			kubeletv1beta1.NeverVerifyPreloadedImages, kubeletv1beta1.NeverVerifyAllowlistedImages, kubeletv1beta1.AlwaysVerify)
	}
	if len(allowlist) > 0 && mode != kubeletv1beta1.NeverVerifyAllowlistedImages {
		return nil, fmt.Errorf("preloadedImagesVerificationAllowlist is only read with %s, not %s", kubeletv1beta1.NeverVerifyAllowlistedImages, mode)
	}
	p := &Policy{mode: mode, exact: map[string]bool{}}
	for _, pattern := range allowlist {
		prefix, wildcard, err := allowPattern(pattern)
		if err != nil {
			return nil, fmt.Errorf("preloadedImagesVerificationAllowlist: %w", err)
		}
		if wildcard {
			p.prefixes = append(p.prefixes, prefix)
		} else {
			p.exact[prefix] = true
		}
	}
	return p, nil
}

// Mode is the policy's name.
func (p *Policy) Mode() kubeletv1beta1.ImagePullCredentialsVerificationPolicy { return p.mode }

// verifies says whether a pod asking for image, present on the node, must
// show credentials recorded for it. pulledByAgent: the agent pulled it
// (or set out to) at some point, so it is not preloaded.
func (p *Policy) verifies(image string, pulledByAgent bool) bool {
	switch p.mode {
	case kubeletv1beta1.NeverVerify:
		return false
	case kubeletv1beta1.NeverVerifyPreloadedImages:
		return pulledByAgent
	case kubeletv1beta1.NeverVerifyAllowlistedImages:
		// The allowlist alone decides, whoever pulled the image: a listed
		// image is trusted, any other is verified.
		return !p.allowed(image)
	default:
		return true
	}
}

func (p *Policy) allowed(image string) bool {
	repo, ok := repository(image)
	if !ok {
		repo = image
	}
	if p.exact[repo] {
		return true
	}
	for _, prefix := range p.prefixes {
		if strings.HasPrefix(repo, prefix) {
			return true
		}
	}
	return false
}

// allowPattern parses one allowlist entry: "registry/path/*" gives the
// prefix "registry/path/"; anything else must be a repository without a
// tag or digest.
func allowPattern(pattern string) (string, bool, error) {
	if pattern != strings.TrimSpace(pattern) {
		return "", false, fmt.Errorf("%q: leading or trailing spaces", pattern)
	}
	if prefix, ok := strings.CutSuffix(pattern, "/*"); ok {
		if prefix == "" || strings.Contains(prefix, "*") {
			return "", false, fmt.Errorf("%q: a wildcard pattern needs at least a registry host, and only a final \"/*\"", pattern)
		}
		return prefix + "/", true, nil
	}
	if pattern == "" || strings.Contains(pattern, "*") {
		return "", false, fmt.Errorf("%q: only patterns ending in \"/*\" may hold a wildcard", pattern)
	}
	repo, ok := repository(pattern)
	if !ok || repo != pattern {
		return "", false, fmt.Errorf("%q: want an image repository without a tag or digest", pattern)
	}
	return pattern, false, nil
}

// repository is the image as written in a pod without its tag and digest
// ("registry:5000/a/b:1@sha256:…" → "registry:5000/a/b"), the key records
// keep credentials under. ok is false for a reference that does not end
// in its tag and digest.
func repository(image string) (string, bool) {
	repo, digest, hasDigest := strings.Cut(image, "@")
	if hasDigest && (digest == "" || strings.Contains(digest, "@")) {
		return "", false
	}
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		if i == len(repo)-1 {
			return "", false
		}
		repo = repo[:i]
	}
	if repo == "" {
		return "", false
	}
	return repo, true
}
