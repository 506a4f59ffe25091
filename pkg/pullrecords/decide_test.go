package pullrecords

import (
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

func mustPolicy(t *testing.T, mode kubeletv1beta1.ImagePullCredentialsVerificationPolicy, allow ...string) *Policy {
	t.Helper()
	p, err := NewPolicy(mode, allow)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	secretA  = kubeletv1beta1.ImagePullSecret{Namespace: "ns1", Name: "regcred", UID: "uid-a", CredentialHash: "hash-a"}
	secretB  = kubeletv1beta1.ImagePullSecret{Namespace: "ns2", Name: "other", UID: "uid-b", CredentialHash: "hash-b"}
	anywhere = &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
)

func TestDecide(t *testing.T) {
	const image = "registry.example:5001/team/app:1.0"
	// The base: an image the agent pulled with secret A, asked for by a
	// pod holding secret A, under the default policy.
	type in struct {
		policy        *Policy
		image         string
		pulledByAgent bool
		recorded      *kubeletv1beta1.ImagePullCredentials
		pod           []kubeletv1beta1.ImagePullSecret
	}
	base := func() in {
		return in{
			policy: mustPolicy(t, kubeletv1beta1.NeverVerifyPreloadedImages), image: image, pulledByAgent: true,
			recorded: &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{secretA}},
			pod:      []kubeletv1beta1.ImagePullSecret{secretA},
		}
	}
	withSecret := func(mut func(*kubeletv1beta1.ImagePullSecret)) []kubeletv1beta1.ImagePullSecret {
		s := secretA
		mut(&s)
		return []kubeletv1beta1.ImagePullSecret{s}
	}
	tests := []struct {
		name     string
		mutate   func(*in)
		pull     bool
		reason   string
		remember *kubeletv1beta1.ImagePullSecret
	}{
		{name: "same secret", mutate: func(*in) {}, reason: ReasonSecret},
		{name: "no credentials against a secret's pull", mutate: func(i *in) { i.pod = nil }, pull: true, reason: ReasonNoMatch},
		{name: "another secret with other credentials", mutate: func(i *in) { i.pod = []kubeletv1beta1.ImagePullSecret{secretB} }, pull: true, reason: ReasonNoMatch},
		{name: "another secret holding the same credential", mutate: func(i *in) {
			i.pod = withSecret(func(s *kubeletv1beta1.ImagePullSecret) { s.Namespace, s.Name, s.UID = "ns3", "copy", "uid-c" })
		}, reason: ReasonHash, remember: &kubeletv1beta1.ImagePullSecret{Namespace: "ns3", Name: "copy", UID: "uid-c", CredentialHash: "hash-a"}},
		{name: "the same secret with new content", mutate: func(i *in) {
			i.pod = withSecret(func(s *kubeletv1beta1.ImagePullSecret) { s.CredentialHash = "hash-new" })
		}, reason: ReasonSecret, remember: &kubeletv1beta1.ImagePullSecret{Namespace: "ns1", Name: "regcred", UID: "uid-a", CredentialHash: "hash-new"}},
		{name: "a secret of the same name recreated (new UID, other credential)", mutate: func(i *in) {
			i.pod = withSecret(func(s *kubeletv1beta1.ImagePullSecret) { s.UID, s.CredentialHash = "uid-new", "hash-new" })
		}, pull: true, reason: ReasonNoMatch},
		{name: "an empty recorded hash matches no empty hash", mutate: func(i *in) {
			i.recorded.KubernetesSecrets[0].CredentialHash = ""
			i.pod = withSecret(func(s *kubeletv1beta1.ImagePullSecret) { s.UID, s.CredentialHash = "uid-x", "" })
		}, pull: true, reason: ReasonNoMatch},
		{name: "one of several pod secrets matches", mutate: func(i *in) { i.pod = []kubeletv1beta1.ImagePullSecret{secretB, secretA} }, reason: ReasonSecret},
		{name: "pulled without credentials: anyone", mutate: func(i *in) { i.recorded, i.pod = anywhere, nil }, reason: ReasonAnonymous},
		{name: "pulled by the agent, nothing recorded for this name", mutate: func(i *in) { i.recorded = nil }, pull: true, reason: ReasonNoRecord},
		{name: "only service accounts recorded", mutate: func(i *in) {
			i.recorded = &kubeletv1beta1.ImagePullCredentials{KubernetesServiceAccounts: []kubeletv1beta1.ImagePullServiceAccount{{Namespace: "ns1", Name: "sa", UID: "u"}}}
		}, pull: true, reason: ReasonNoRecord},

		{name: "preloaded under NeverVerifyPreloadedImages", mutate: func(i *in) { i.pulledByAgent, i.recorded, i.pod = false, nil, nil }, reason: ReasonPolicy},
		{name: "NeverVerify trusts what the agent pulled", mutate: func(i *in) {
			i.policy, i.pod = mustPolicy(t, kubeletv1beta1.NeverVerify), nil
		}, reason: ReasonPolicy},
		{name: "AlwaysVerify: preloaded needs a record", mutate: func(i *in) {
			i.policy, i.pulledByAgent, i.recorded = mustPolicy(t, kubeletv1beta1.AlwaysVerify), false, nil
		}, pull: true, reason: ReasonNoRecord},
		{name: "AlwaysVerify: matching secret", mutate: func(i *in) { i.policy = mustPolicy(t, kubeletv1beta1.AlwaysVerify) }, reason: ReasonSecret},
		{name: "allowlisted repository", mutate: func(i *in) {
			i.policy, i.pod = mustPolicy(t, kubeletv1beta1.NeverVerifyAllowlistedImages, "registry.example:5001/team/app"), nil
		}, reason: ReasonPolicy},
		{name: "allowlisted prefix, even pulled by the agent", mutate: func(i *in) {
			i.policy, i.pod = mustPolicy(t, kubeletv1beta1.NeverVerifyAllowlistedImages, "registry.example:5001/*"), nil
		}, reason: ReasonPolicy},
		{name: "not allowlisted and preloaded", mutate: func(i *in) {
			i.policy, i.pulledByAgent, i.recorded = mustPolicy(t, kubeletv1beta1.NeverVerifyAllowlistedImages, "registry.example:5001/other/*"), false, nil
		}, pull: true, reason: ReasonNoRecord},
		{name: "a prefix matches whole path segments only", mutate: func(i *in) {
			i.policy, i.pod = mustPolicy(t, kubeletv1beta1.NeverVerifyAllowlistedImages, "registry.example:5001/te/*"), nil
		}, pull: true, reason: ReasonNoMatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := base()
			tt.mutate(&i)
			got := Decide(i.policy, i.image, i.pulledByAgent, i.recorded, i.pod)
			if got.Pull != tt.pull || got.Reason != tt.reason {
				t.Errorf("Decide = pull %v (%s), want pull %v (%s)", got.Pull, got.Reason, tt.pull, tt.reason)
			}
			switch {
			case (got.Remember == nil) != (tt.remember == nil):
				t.Errorf("Remember = %+v, want %+v", got.Remember, tt.remember)
			case got.Remember != nil && *got.Remember != *tt.remember:
				t.Errorf("Remember = %+v, want %+v", *got.Remember, *tt.remember)
			}
		})
	}
}

func TestDecideStopsRememberingPastTheLimit(t *testing.T) {
	recorded := &kubeletv1beta1.ImagePullCredentials{}
	for i := range rememberLimit {
		s := secretA
		s.UID = string(rune('a'+i%26)) + string(rune('a'+i/26))
		recorded.KubernetesSecrets = append(recorded.KubernetesSecrets, s)
	}
	pod := secretA
	pod.UID = "another"
	v := Decide(mustPolicy(t, kubeletv1beta1.AlwaysVerify), "r/app:1", true, recorded, []kubeletv1beta1.ImagePullSecret{pod})
	if v.Pull || v.Remember != nil {
		t.Errorf("Decide = %+v, want a match by hash, not remembered", v)
	}
}

func TestNewPolicy(t *testing.T) {
	tests := []struct {
		name  string
		mode  kubeletv1beta1.ImagePullCredentialsVerificationPolicy
		allow []string
		ok    bool
	}{
		{name: "default", mode: kubeletv1beta1.NeverVerifyPreloadedImages, ok: true},
		{name: "unknown", mode: "Sometimes"},
		{name: "empty", mode: ""},
		{name: "allowlist with another policy", mode: kubeletv1beta1.AlwaysVerify, allow: []string{"r/a"}},
		{name: "repository and prefix", mode: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"r.io/a", "r.io:5000/b/*"}, ok: true},
		{name: "tag", mode: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"r.io/a:1"}},
		{name: "digest", mode: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"r.io/a@sha256:abc"}},
		{name: "inner wildcard", mode: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"r.io/*/a"}},
		{name: "bare wildcard", mode: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"/*"}},
		{name: "spaces", mode: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{" r.io/a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPolicy(tt.mode, tt.allow)
			if (err == nil) != tt.ok {
				t.Errorf("NewPolicy(%q, %q) err = %v, want ok %v", tt.mode, tt.allow, err, tt.ok)
			}
		})
	}
}

func TestRepository(t *testing.T) {
	for image, want := range map[string]string{
		"busybox":                              "busybox",
		"busybox:1.36":                         "busybox",
		"127.0.0.1:5001/e2e/busybox:1.0":       "127.0.0.1:5001/e2e/busybox",
		"127.0.0.1:5001/e2e/busybox":           "127.0.0.1:5001/e2e/busybox",
		"r.io/a:1@sha256:0123":                 "r.io/a",
		"r.io/a@sha256:0123":                   "r.io/a",
		"docker.io/library/busybox:latest":     "docker.io/library/busybox",
		"registry.example:443/x/y/z:v1.2.3-rc": "registry.example:443/x/y/z",
	} {
		if got, ok := repository(image); !ok || got != want {
			t.Errorf("repository(%q) = %q, %v; want %q", image, got, ok, want)
		}
	}
	for _, bad := range []string{"", "r.io/a:", "r.io/a@", ":1"} {
		if got, ok := repository(bad); ok {
			t.Errorf("repository(%q) = %q, want not ok", bad, got)
		}
	}
}
