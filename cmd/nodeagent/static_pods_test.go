package main

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/config"
)

// loadWithoutWarnings is the agent's configuration on node nodeName from
// a KubeletConfiguration file that loads without a warning.
func loadWithoutWarnings(t *testing.T, file, nodeName string) *agentConfig {
	t.Helper()
	kc, warnings, err := loadKubeletConfig(file, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	return &agentConfig{kubelet: kc, nodeName: nodeName}
}

// The kubeadm file that loads without warnings (TestKubeadmZeroValuesGetDefaults)
// also gets its static pods: staticPodPath is read, every 20s by default.
func TestKubeadmConfigRunsStaticPods(t *testing.T) {
	cfg := loadWithoutWarnings(t, "testdata/kubeadm-config.yaml", "cp-1")
	kc := cfg.kubelet
	sc := staticSourceConfig(cfg, nil)
	if sc.Dir != "/etc/kubernetes/manifests" || sc.Period != 20*time.Second || sc.NodeName != "cp-1" {
		t.Errorf("static pod source config = %+v", sc)
	}
	src, err := newStaticPodSource(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.(*config.FileSource); !ok {
		t.Errorf("source = %T, want the file source", src)
	}

	kc.StaticPodPath = ""
	if src, _ := newStaticPodSource(context.Background(), cfg, nil); src.HasSynced() != true || len(src.Pods()) != 0 {
		t.Error("without staticPodPath the source must be empty and synced")
	}
}

// A KubeletConfiguration with staticPodURL loads without warnings, and
// with staticPodPath too runs both sources as one.
func TestStaticPodPathAndURLRunTogether(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "config.yaml", header+"staticPodPath: /etc/kubernetes/manifests\n"+
		"staticPodURL: http://127.0.0.1:8080/pods\nstaticPodURLHeader: {X-Test: [\"yes\"], X-Multi: [one, two]}\n")
	cfg := loadWithoutWarnings(t, file, "n1")
	kc := cfg.kubelet
	hc := httpSourceConfig(cfg, nil)
	if hc.URL != "http://127.0.0.1:8080/pods" || hc.Period != 20*time.Second || hc.NodeName != "n1" ||
		hc.Header.Get("X-Test") != "yes" || strings.Join(hc.Header.Values("X-Multi"), ",") != "one,two" {
		t.Errorf("URL source config = %+v", hc)
	}
	src, err := newStaticPodSource(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	both, ok := src.(staticSources)
	if !ok || len(both) != 2 {
		t.Fatalf("source = %T %v, want both sources", src, src)
	}
	if _, ok := both[0].(*config.FileSource); !ok {
		t.Errorf("first source = %T, want the file source", both[0])
	}
	if _, ok := both[1].(*config.HTTPSource); !ok {
		t.Errorf("second source = %T, want the URL source", both[1])
	}

	kc.StaticPodPath = ""
	if src, err := newStaticPodSource(context.Background(), cfg, nil); err != nil {
		t.Error(err)
	} else if _, ok := src.(*config.HTTPSource); !ok {
		t.Errorf("staticPodURL alone: source = %T, want the URL source", src)
	}
	kc.StaticPodURL = "/etc/kubernetes/pods.yaml"
	if _, err := newStaticPodSource(context.Background(), cfg, nil); err == nil {
		t.Error("a staticPodURL that is no URL is accepted")
	}
}

// The kubelet's deprecated flags set the URL source's fields; the header
// flag repeats, its values adding up.
func TestManifestURLFlags(t *testing.T) {
	f := newFlags(newKlogFlags())
	warnings, err := f.parse(append(baseArgs(t), "--manifest-url=http://127.0.0.1:8080/pods", "--http-check-frequency=1s",
		"--manifest-url-header=X-Test:yes,X-Multi:one", "--manifest-url-header", "X-Multi: two"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, buildWarnings, err := buildConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	kc := cfg.kubelet
	want := map[string][]string{"X-Test": {"yes"}, "X-Multi": {"one", "two"}}
	if kc.StaticPodURL != "http://127.0.0.1:8080/pods" || kc.HTTPCheckFrequency.Duration != time.Second ||
		!reflect.DeepEqual(kc.StaticPodURLHeader, want) {
		t.Errorf("staticPodURL %q httpCheckFrequency %v staticPodURLHeader %v", kc.StaticPodURL, kc.HTTPCheckFrequency, kc.StaticPodURLHeader)
	}
	joined := strings.Join(append(warnings, buildWarnings...), "\n")
	for _, name := range []string{"--manifest-url", "--manifest-url-header", "--http-check-frequency"} {
		if strings.Count(joined, "flag "+name+" has been deprecated") != 1 {
			t.Errorf("want one deprecation warning naming %s, got:\n%s", name, joined)
		}
	}
	if strings.Contains(joined, "does not support") {
		t.Errorf("a URL flag is said to be unsupported:\n%s", joined)
	}

	f = newFlags(newKlogFlags())
	if _, err := f.parse(append(baseArgs(t), "--manifest-url-header=X-Test")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := buildConfig(f); err == nil || !strings.Contains(err.Error(), "--manifest-url-header") {
		t.Errorf("a header without a value: err = %v", err)
	}
}

// fakeSource is a static pod source whose pods and sync the test sets.
type fakeSource struct {
	pods    []*v1.Pod
	synced  bool
	handler config.Handler
	ran     chan struct{}
}

func (f *fakeSource) SetHandler(h config.Handler) error { f.handler = h; return nil }
func (f *fakeSource) HasSynced() bool                   { return f.synced }
func (f *fakeSource) Pods() []*v1.Pod                   { return f.pods }
func (f *fakeSource) Run(ctx context.Context) error {
	close(f.ran)
	<-ctx.Done()
	return nil
}

func TestStaticSourcesFanOut(t *testing.T) {
	pod := func(name string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	}
	file := &fakeSource{pods: []*v1.Pod{pod("b"), pod("d")}, synced: true, ran: make(chan struct{})}
	url := &fakeSource{pods: []*v1.Pod{pod("a"), pod("c")}, ran: make(chan struct{})}
	ss := staticSources{file, url}
	h := staticPodHandlers{}
	if err := ss.SetHandler(h); err != nil {
		t.Fatal(err)
	}
	if file.handler == nil || url.handler == nil {
		t.Error("a source has no handler")
	}
	if ss.HasSynced() {
		t.Error("synced before every source is")
	}
	url.synced = true
	if !ss.HasSynced() {
		t.Error("not synced when every source is")
	}
	var names []string
	for _, p := range ss.Pods() {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "a,b,c,d" {
		t.Errorf("pods = %v", names)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- ss.Run(ctx) }()
	<-file.ran
	<-url.ran
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}
