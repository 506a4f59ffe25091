package pullrecords

import (
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Why a verdict was reached; logged, and checked by the tests.
const (
	// ReasonPolicy: the policy trusts the image without credentials.
	ReasonPolicy = "policy"
	// ReasonAnonymous: the image was pulled without credentials, or with
	// ones every pod on the node has, so any pod may use it.
	ReasonAnonymous = "accessible to every pod"
	// ReasonSecret: one of the pod's pull secrets is one recorded pulling
	// the image (same namespace, name and UID).
	ReasonSecret = "same secret"
	// ReasonHash: one of the pod's credentials is the one recorded, held
	// in another secret.
	ReasonHash = "same credential"
	// ReasonNoRecord: nothing says which credentials pulled the image
	// under this name.
	ReasonNoRecord = "no record of the credentials"
	// ReasonNoMatch: none of the pod's credentials is recorded.
	ReasonNoMatch = "no matching credential"
)

// rememberLimit stops records growing without bound from matches alone
// (many namespaces holding copies of one credential): past it, a match
// is used but not written down.
const rememberLimit = 100

// Verdict is whether a pod must pull an image it finds present.
type Verdict struct {
	// Pull: the image goes through a pull with the pod's credentials (or
	// fails as absent under pullPolicy Never).
	Pull   bool
	Reason string
	// Remember is a credential of the pod to add to the image's record:
	// one that matched by its hash under other secret coordinates, or by
	// its coordinates with a changed hash, so that it matches at once
	// next time.
	Remember *kubeletv1beta1.ImagePullSecret
}

// Decide says whether a pod asking for image, present on the node, may
// use it as it is. pulledByAgent says the agent pulled the image (a record
// or an intent exists); recorded are the credentials recorded pulling it
// under image's repository (nil when none are); pod are the pod's
// credentials for the image's registry, one per pull secret entry.
func Decide(policy *Policy, image string, pulledByAgent bool, recorded *kubeletv1beta1.ImagePullCredentials, pod []kubeletv1beta1.ImagePullSecret) Verdict {
	if !policy.verifies(image, pulledByAgent) {
		return Verdict{Reason: ReasonPolicy}
	}
	if recorded == nil {
		return Verdict{Pull: true, Reason: ReasonNoRecord}
	}
	if recorded.NodePodsAccessible {
		return Verdict{Reason: ReasonAnonymous}
	}
	if len(recorded.KubernetesSecrets) == 0 {
		// Service accounts (the kubelet's credential providers) are not
		// something nodeagent can show.
		return Verdict{Pull: true, Reason: ReasonNoRecord}
	}
	remember := func(s kubeletv1beta1.ImagePullSecret) *kubeletv1beta1.ImagePullSecret {
		if len(recorded.KubernetesSecrets) >= rememberLimit {
			return nil
		}
		return &s
	}
	for _, have := range pod {
		for _, rec := range recorded.KubernetesSecrets {
			sameSecret := have.UID == rec.UID && have.Namespace == rec.Namespace && have.Name == rec.Name
			sameHash := rec.CredentialHash != "" && have.CredentialHash == rec.CredentialHash
			switch {
			case sameHash && sameSecret:
				return Verdict{Reason: ReasonSecret}
			case sameHash:
				return Verdict{Reason: ReasonHash, Remember: remember(have)}
			case sameSecret:
				// The secret's content changed since: it still names what
				// the pod was granted, and the new content is remembered.
				return Verdict{Reason: ReasonSecret, Remember: remember(have)}
			}
		}
	}
	return Verdict{Pull: true, Reason: ReasonNoMatch}
}
