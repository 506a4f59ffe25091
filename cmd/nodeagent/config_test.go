package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKubeadmZeroValuesGetDefaults(t *testing.T) {
	kc, warnings, err := loadKubeletConfig("testdata/kubeadm-config.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("unknown-field warnings for a kubeadm file: %v", warnings)
	}
	applyEvictionDefaults(kc)
	if err := validateKubeletConfig(kc); err != nil {
		t.Fatal(err)
	}
	// Every field kubeadm writes is honoured or at its default: nothing
	// warned, nothing refused (TestKindConfigIsHonoured for kind's).
	fieldWarnings, err := checkConfigFields(kc)
	if err != nil || len(fieldWarnings) != 0 {
		t.Errorf("kubeadm's fields: warnings %q, err %v; want neither", fieldWarnings, err)
	}
	durations := map[string][2]time.Duration{
		"syncFrequency":             {kc.SyncFrequency.Duration, time.Minute},
		"nodeStatusUpdateFrequency": {kc.NodeStatusUpdateFrequency.Duration, 10 * time.Second},
		"nodeStatusReportFrequency": {kc.NodeStatusReportFrequency.Duration, 5 * time.Minute},
		"runtimeRequestTimeout":     {kc.RuntimeRequestTimeout.Duration, 2 * time.Minute},
		"webhook cacheTTL":          {kc.Authentication.Webhook.CacheTTL.Duration, 2 * time.Minute},
	}
	for name, d := range durations {
		if d[0] != d[1] {
			t.Errorf("%s = %v, want %v", name, d[0], d[1])
		}
	}
	if kc.NodeLeaseDurationSeconds != 40 || kc.MaxPods != 110 || *kc.HealthzPort != 10248 || kc.Port != 10250 || kc.ReadOnlyPort != 0 {
		t.Errorf("ints: lease %d maxPods %d healthz %d port %d ro %d", kc.NodeLeaseDurationSeconds, kc.MaxPods, *kc.HealthzPort, kc.Port, kc.ReadOnlyPort)
	}
	if kc.ContainerRuntimeEndpoint != "unix:///run/containerd/containerd.sock" || kc.CgroupDriver != "systemd" {
		t.Errorf("endpoint %q driver %q", kc.ContainerRuntimeEndpoint, kc.CgroupDriver)
	}
	if *kc.Authentication.Anonymous.Enabled || !*kc.Authentication.Webhook.Enabled || kc.Authorization.Mode != kubeletv1beta1.KubeletAuthorizationModeWebhook {
		t.Errorf("auth defaults not safe")
	}
	if kc.EvictionHard["memory.available"] != "100Mi" || kc.EvictionHard["nodefs.available"] != "10%" ||
		kc.EvictionHard["imagefs.available"] != "15%" || kc.EvictionHard["nodefs.inodesFree"] != "5%" {
		t.Errorf("evictionHard = %v", kc.EvictionHard)
	}
	if kc.Logging.FlushFrequency.Duration.Duration != 5*time.Second || kc.Logging.Format != "text" {
		t.Errorf("logging = %+v", kc.Logging)
	}
	// Honoured, not only accepted: TestKubeadmConfigRotatesClientCertificate.
	if !kc.RotateCertificates {
		t.Error("rotateCertificates: true was lost")
	}
}

func TestEmptyConfigDefaults(t *testing.T) {
	kc, _, err := loadKubeletConfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	applyEvictionDefaults(kc)
	if err := validateKubeletConfig(kc); err != nil {
		t.Fatal(err)
	}
	if kc.CgroupDriver != "cgroupfs" || kc.HealthzBindAddress != "127.0.0.1" || kc.Address != "0.0.0.0" {
		t.Errorf("defaults: %q %q %q", kc.CgroupDriver, kc.HealthzBindAddress, kc.Address)
	}
}

func TestReportFrequencyFollowsExplicitUpdateFrequency(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "c.yaml", header+"nodeStatusUpdateFrequency: 4s\n")
	kc, _, err := loadKubeletConfig(p, "")
	if err != nil {
		t.Fatal(err)
	}
	if kc.NodeStatusReportFrequency.Duration != 4*time.Second {
		t.Errorf("report frequency = %v, want the update frequency", kc.NodeStatusReportFrequency.Duration)
	}
}

func TestDropInsMergeInLexicalOrder(t *testing.T) {
	dir := t.TempDir()
	base := writeFile(t, dir, "config.yaml", header+"maxPods: 50\nclusterDNS: [10.0.0.10]\nevictionHard:\n  memory.available: 200Mi\n")
	dropins := filepath.Join(dir, "conf.d")
	writeFile(t, dropins, "20-late.conf", header+"maxPods: 70\n")
	writeFile(t, dropins, "10-early.conf", header+"maxPods: 60\nnodeLeaseDurationSeconds: 20\nevictionHard:\n  nodefs.available: 5%\n")
	writeFile(t, dropins, "README", "not a config")

	kc, warnings, err := loadKubeletConfig(base, dropins)
	if err != nil {
		t.Fatal(err)
	}
	if kc.MaxPods != 70 || kc.NodeLeaseDurationSeconds != 20 || len(kc.ClusterDNS) != 1 {
		t.Errorf("maxPods %d lease %d dns %v", kc.MaxPods, kc.NodeLeaseDurationSeconds, kc.ClusterDNS)
	}
	if kc.EvictionHard["memory.available"] != "200Mi" || kc.EvictionHard["nodefs.available"] != "5%" {
		t.Errorf("maps merge key by key: %v", kc.EvictionHard)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "README") {
		t.Errorf("warnings = %v", warnings)
	}
}

func TestUnknownFieldsWarnOncePerField(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "c.yaml", header+"maxPods: 30\nfrobnicate: true\nMaxPods: 99\n")
	kc, warnings, err := loadKubeletConfig(p, "")
	if err != nil {
		t.Fatal(err)
	}
	if kc.MaxPods != 30 {
		t.Errorf("maxPods = %d: field names are case-sensitive", kc.MaxPods)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0]+warnings[1], `"frobnicate"`) || !strings.Contains(warnings[0]+warnings[1], `"MaxPods"`) {
		t.Errorf("warnings = %v", warnings)
	}
}

func TestConfigFileErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    string
	}{
		{name: "negative lease", content: header + "nodeLeaseDurationSeconds: -5\n", want: "nodeLeaseDurationSeconds: must be > 0"},
		{name: "bad cgroup driver", content: header + "cgroupDriver: magic\n", want: "cgroupDriver"},
		{name: "negative duration", content: header + "syncFrequency: -1s\n", want: "syncFrequency: must be > 0"},
		{name: "bad eviction", content: header + "evictionHard:\n  memory.available: lots\n", want: "evictionHard[memory.available]"},
		{name: "bad endpoint", content: header + "containerRuntimeEndpoint: tcp://x:1\n", want: "containerRuntimeEndpoint"},
		{name: "bad swap behaviour", content: header + "memorySwap:\n  swapBehavior: UnlimitedSwap\n",
			want: `memorySwap.swapBehavior: "UnlimitedSwap" must be one of: "", "LimitedSwap" or "NoSwap"`},
		{name: "wrong kind", content: "apiVersion: v1\nkind: Pod\n", want: "want apiVersion kubelet.config.k8s.io/v1beta1"},
		{name: "wrong type", content: header + "maxPods: many\n", want: "maxPods"},
		{name: "bad healthz address", content: header + "healthzBindAddress: localhost\n", want: "healthzBindAddress"},
		{name: "image GC low threshold not below high", content: header + "imageGCHighThresholdPercent: 80\nimageGCLowThresholdPercent: 80\n", want: "imageGCLowThresholdPercent: (80) must be less than imageGCHighThresholdPercent (80)"},
		{name: "image GC high threshold above 100", content: header + "imageGCHighThresholdPercent: 101\n", want: "imageGCHighThresholdPercent: must be between 0 and 100"},
		{name: "negative maximum image age", content: header + "imageMaximumGCAge: -1s\n", want: "imageMaximumGCAge: must not be negative"},
		{name: "maximum image age within the minimum", content: header + "imageMaximumGCAge: 1m\n", want: "imageMaximumGCAge: (1m0s) must be greater than imageMinimumGCAge (2m0s)"},
		{name: "unknown pull credential policy", content: header + "imagePullCredentialsVerificationPolicy: Sometimes\n", want: `imagePullCredentialsVerificationPolicy: unknown policy "Sometimes"`},
		{name: "allowlist without its policy", content: header + "preloadedImagesVerificationAllowlist: [registry.k8s.io/pause]\n", want: "preloadedImagesVerificationAllowlist is only read with NeverVerifyAllowlistedImages"},
		{name: "allowlist entry with a tag", content: header + "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [registry.k8s.io/pause:3.10]\n", want: "without a tag or digest"},
		{name: "idsPerPod below 65536", content: header + "userNamespaces:\n  idsPerPod: 1000\n", want: "userNamespaces.idsPerPod must not be less than 65536"},
		{name: "idsPerPod not a multiple of 65536", content: header + "userNamespaces:\n  idsPerPod: 100000\n", want: "userNamespaces.idsPerPod must be a multiple of 65536"},
		{name: "idsPerPod past 32 bits", content: header + "userNamespaces:\n  idsPerPod: 4294967296\n", want: "userNamespaces.idsPerPod must not be more than 4294967295"},
		{name: "pull credential policy with its gate off", content: header + "featureGates:\n  KubeletEnsureSecretPulledImages: false\nimagePullCredentialsVerificationPolicy: AlwaysVerify\n", want: "must not be set while the KubeletEnsureSecretPulledImages feature gate is off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "c.yaml", tt.content)
			kc, _, err := loadKubeletConfig(p, "")
			if err == nil {
				applyEvictionDefaults(kc)
				err = validateKubeletConfig(kc)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	var err error
	if _, _, err = loadKubeletConfig("testdata/absent.yaml", ""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestMergePatch(t *testing.T) {
	target := map[string]any{"a": 1.0, "m": map[string]any{"x": 1.0, "y": 2.0}, "gone": true}
	patch := map[string]any{"a": 2.0, "m": map[string]any{"y": nil, "z": 3.0}, "gone": nil, "list": []any{1.0}}
	got := mergePatch(target, patch).(map[string]any)
	m := got["m"].(map[string]any)
	if got["a"] != 2.0 || m["x"] != 1.0 || m["z"] != 3.0 || m["y"] != nil || got["gone"] != nil || len(got["list"].([]any)) != 1 {
		t.Errorf("merged = %v", got)
	}
}

// The example operators copy must load as written: a misspelt field there
// would be silently ignored on every node that uses it.
func TestExampleManifestConfigLoads(t *testing.T) {
	kc, warnings, err := loadKubeletConfig("../../manifests/config.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	applyEvictionDefaults(kc)
	if err := validateKubeletConfig(kc); err != nil {
		t.Fatal(err)
	}
	// Nor may it set a field nodeagent would only warn of or refuse.
	if fieldWarnings, err := checkConfigFields(kc); err != nil || len(fieldWarnings) != 0 {
		t.Errorf("fields: warnings %q, err %v; want neither", fieldWarnings, err)
	}
	if kc.CgroupDriver != "cgroupfs" || !kc.ServerTLSBootstrap || kc.Authentication.X509.ClientCAFile != "/etc/kubernetes/pki/ca.crt" {
		t.Errorf("driver %q serverTLSBootstrap %v clientCAFile %q", kc.CgroupDriver, kc.ServerTLSBootstrap, kc.Authentication.X509.ClientCAFile)
	}
}

// kind's patch turns eviction off with 0% thresholds and lets images fill
// the disk: all of it honoured, so the agent says nothing.
func TestKindConfigIsHonoured(t *testing.T) {
	p := writeFile(t, t.TempDir(), "c.yaml", header+"failSwapOn: false\nfailCgroupV1: false\nimageGCHighThresholdPercent: 100\n"+
		"evictionHard:\n  nodefs.available: \"0%\"\n  nodefs.inodesFree: \"0%\"\n  imagefs.available: \"0%\"\n")
	kc, _, err := loadKubeletConfig(p, "")
	if err != nil {
		t.Fatal(err)
	}
	applyEvictionDefaults(kc)
	if err := validateKubeletConfig(kc); err != nil {
		t.Fatal(err)
	}
	if warnings, err := checkConfigFields(kc); err != nil || len(warnings) != 0 {
		t.Errorf("warnings %q, err %v; want neither", warnings, err)
	}
}
