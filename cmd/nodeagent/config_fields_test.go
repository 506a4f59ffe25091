package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/server"
)

var update = flag.Bool("update", false, "write the generated configuration field list into README.md")

const (
	readmePath        = "../../README.md"
	fieldsStartMarker = "<!-- config-fields:start -->\n"
	fieldsEndMarker   = "<!-- config-fields:end -->"
)

// Every field of the v1beta1 struct is in the table, nothing else is, and
// README.md lists them as the table says (go test ./cmd/nodeagent -run
// TestConfigFieldTable -update rewrites the list).
func TestConfigFieldTable(t *testing.T) {
	paths := configFieldPaths()
	known := map[string]bool{}
	for _, p := range paths {
		known[p] = true
		if _, ok := configFields[p]; !ok {
			t.Errorf("KubeletConfiguration field %s is not classified in configFields", p)
		}
	}
	for p, r := range configFields {
		if !known[p] {
			t.Errorf("configFields has %s, which KubeletConfiguration does not", p)
		}
		if r.note == "" {
			t.Errorf("configFields[%s] has no note", p)
		}
	}
	// The deprecated config-mirror flags must name real fields, or a flag
	// would be dropped on decoding without a word.
	for name, cf := range configFlags {
		if !known[cf.path] && !known[strings.SplitN(cf.path, ".", 2)[0]] {
			t.Errorf("flag --%s sets %s, which KubeletConfiguration does not have", name, cf.path)
		}
	}

	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start, end := strings.Index(readme, fieldsStartMarker), strings.Index(readme, fieldsEndMarker)
	if start < 0 || end < start {
		t.Fatalf("README.md lacks the %q ... %q markers", strings.TrimSpace(fieldsStartMarker), fieldsEndMarker)
	}
	want := configFieldsMarkdown()
	got := readme[start+len(fieldsStartMarker) : end]
	if got == want {
		return
	}
	if !*update {
		t.Fatalf("README.md's configuration field list is stale: run go test ./cmd/nodeagent -run TestConfigFieldTable -update")
	}
	out := readme[:start+len(fieldsStartMarker)] + want + readme[end:]
	if err := os.WriteFile(readmePath, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The gate list is generated from the Kubernetes release the module pins;
// after a bump it must be generated again (testdata/featuregates).
func TestFeatureGateListMatchesPinnedRelease(t *testing.T) {
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubelet v0\.(\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod does not require k8s.io/kubelet")
	}
	want := "k8s.io/kubernetes@v1." + string(m[1]) + " pkg/features"
	if !strings.HasPrefix(kubeletFeatureGatesSource, want) {
		t.Errorf("kubeletFeatureGates comes from %q; go.mod pins %s: regenerate it with testdata/featuregates", kubeletFeatureGatesSource, want)
	}
	for name := range honouredGates {
		if _, ok := kubeletFeatureGates[name]; !ok {
			t.Errorf("honoured gate %s is not a kubelet gate", name)
		}
	}
}

// defaultedConfig is a configuration as buildConfig leaves it, after mutate.
func defaultedConfig(mutate func(kc *kubeletv1beta1.KubeletConfiguration)) *kubeletv1beta1.KubeletConfiguration {
	kc := &kubeletv1beta1.KubeletConfiguration{}
	mutate(kc)
	setDefaults(kc)
	applyEvictionDefaults(kc)
	return kc
}

func TestCheckConfigFields(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(kc *kubeletv1beta1.KubeletConfiguration)
		warnings []string // each names a warning's field, in order
		refused  []string // fields the error must name
	}{
		{name: "empty", mutate: func(*kubeletv1beta1.KubeletConfiguration) {}},
		{name: "defaults written out say nothing", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.RegistryPullQPS = ptr.To[int32](5)
			kc.OOMScoreAdj = ptr.To[int32](-999)
			kc.CPUManagerPolicy = "none"
			kc.TopologyManagerPolicy = "none"
			kc.EnableSystemLogQuery = ptr.To(false)
			kc.ReadOnlyPort = 0
			kc.EvictionSoft = map[string]string{}
			kc.FeatureGates = map[string]bool{"KubeletPSI": kubeletFeatureGates["KubeletPSI"].def}
		}},
		{name: "honoured fields say nothing", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.EnableServer = ptr.To(false)
			kc.EnableDebuggingHandlers = ptr.To(false)
			kc.MaxPods = 20
			kc.FailCgroupV1 = ptr.To(false)
			kc.ImageGCHighThresholdPercent = ptr.To[int32](90)
		}},
		{name: "warned", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ReadOnlyPort = 10255
			kc.ShutdownGracePeriod.Duration = 30e9
			kc.MaxOpenFiles = 4096
		}, warnings: []string{"maxOpenFiles", "readOnlyPort", "shutdownGracePeriod"}},
		{name: "refused", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.RunOnce = true
			kc.CPUManagerPolicy = "static"
			kc.ReadOnlyPort = 10255
		}, warnings: []string{"readOnlyPort"}, refused: []string{"cpuManagerPolicy", "runOnce"}},
		{name: "attach/detach off is refused", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.EnableControllerAttachDetach = ptr.To(false)
		}, refused: []string{"enableControllerAttachDetach"}},
		{name: "image service endpoint equal to the runtime's", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ContainerRuntimeEndpoint = "unix:///run/x.sock"
			kc.ImageServiceEndpoint = "unix:///run/x.sock"
		}},
		{name: "separate image service endpoint", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ImageServiceEndpoint = "unix:///run/images.sock"
		}, refused: []string{"imageServiceEndpoint"}},
		{name: "NeverVerify", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ImagePullCredentialsVerificationPolicy = kubeletv1beta1.NeverVerify
		}},
		{name: "AlwaysVerify", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ImagePullCredentialsVerificationPolicy = kubeletv1beta1.AlwaysVerify
		}},
		{name: "allowlist", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ImagePullCredentialsVerificationPolicy = kubeletv1beta1.NeverVerifyAllowlistedImages
			kc.PreloadedImagesVerificationAllowlist = []string{"registry.k8s.io/*"}
		}},
		{name: "nested fields honoured", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.MemorySwap.SwapBehavior = "LimitedSwap"
			kc.UserNamespaces = &kubeletv1beta1.UserNamespaces{IDsPerPod: ptr.To[int64](131072)}
		}},
		{name: "logging", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.Logging.Format = "json"
		}, warnings: []string{"logging"}},
		{name: "restart cap with its gate off", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"KubeletCrashLoopBackOffMax": false}
			kc.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: 60e9}
		}, refused: []string{"crashLoopBackOff.maxContainerRestartPeriod"}},
		{name: "gates", mutate: func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{
				"NoSuchGate":                 true,
				"UserNamespacesSupport":      false, // locked to true in 1.37
				"AllAlpha":                   true,
				"KubeletCrashLoopBackOffMax": false,
			}
		}, warnings: []string{"featureGates: AllAlpha=true"}, refused: []string{
			"unrecognized feature gate: NoSuchGate",
			"cannot set feature gate UserNamespacesSupport to false, feature is locked to true",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, err := checkConfigFields(defaultedConfig(tt.mutate))
			if len(warnings) != len(tt.warnings) {
				t.Fatalf("warnings = %q, want one each for %q", warnings, tt.warnings)
			}
			for i, w := range warnings {
				if !strings.HasPrefix(w, tt.warnings[i]) {
					t.Errorf("warning %d = %q, want it to start with %q", i, w, tt.warnings[i])
				}
			}
			if len(tt.refused) == 0 {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if !errors.Is(err, errUnsupportedConfig) {
				t.Fatalf("err = %v, want errUnsupportedConfig", err)
			}
			for _, r := range tt.refused {
				if !strings.Contains(err.Error(), r) {
					t.Errorf("err = %v, want it to name %q", err, r)
				}
			}
		})
	}
}

func TestBuildConfigFeatureGateFlag(t *testing.T) {
	tests := []struct {
		name    string
		gates   string
		want    string // in the error; empty for none
		warning string
	}{
		{name: "unknown", gates: "Foo=true", want: "unrecognized feature gate: Foo"},
		{name: "locked", gates: "UserNamespacesSupport=false", want: "cannot set feature gate UserNamespacesSupport to false, feature is locked to true"},
		{name: "not read", gates: "AllAlpha=true", warning: "featureGates: AllAlpha=true"},
		{name: "default", gates: "AllAlpha=false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFlags(newKlogFlags())
			if _, err := f.parse(append(baseArgs(t), "--feature-gates="+tt.gates)); err != nil {
				t.Fatal(err)
			}
			_, warnings, err := buildConfig(f)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			joined := strings.Join(warnings, "\n")
			if tt.warning != "" && strings.Count(joined, tt.warning) != 1 {
				t.Errorf("want one warning %q, got:\n%s", tt.warning, joined)
			}
			if tt.warning == "" && strings.Contains(joined, "featureGates:") {
				t.Errorf("unexpected gate warning:\n%s", joined)
			}
		})
	}
}

// enableServer: false binds nothing: the port stays free.
func TestEnableServerFalseOpensNoPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()

	newServer := func(enable bool) (*server.Server, error) {
		kc := defaultedConfig(func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.EnableServer = ptr.To(enable)
			kc.Address = "127.0.0.1"
			kc.Port = int32(port)
			kc.Authentication.Webhook.Enabled = ptr.To(false)
			kc.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow
		})
		cfg := &agentConfig{kubelet: kc, nodeName: "node-1", certDir: t.TempDir()}
		return newNodeServer(cfg, nil, runtimeapi.NewRuntimeServiceClient(nil), func() []*v1.Pod { return nil }, nodeAPIExtras{})
	}

	if s, err := newServer(false); err != nil || s != nil {
		t.Fatalf("enableServer false: server %v, err %v; want none", s != nil, err)
	}
	l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("port %d taken with enableServer false: %v", port, err)
	}
	_ = l.Close()

	s, err := newServer(true)
	if err != nil || s == nil {
		t.Fatalf("enableServer true: server %v, err %v", s != nil, err)
	}
	defer func() {
		// Run with an ended context lets the listener go.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = s.Run(ctx)
	}()
	if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
		_ = l.Close()
		t.Fatalf("enableServer true: port %d is free", port)
	}
}
