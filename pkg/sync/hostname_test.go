package sync

import (
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/ptr"
)

// A pod's hostnameOverride is its sandbox's hostname and the name its
// hosts file gives its address, with no FQDN though it has a subdomain.
func TestWorkerHostnameOverride(t *testing.T) {
	pod := basePod(func(p *v1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		p.Spec.HostnameOverride, p.Spec.Hostname, p.Spec.Subdomain = ptr.To("web.example.com"), "db", "sub"
	})
	h := newHarness(t, pod)
	rec, _ := withInputs(h)
	sandboxes := &sandboxRecorder{Runtime: rec}
	h.w.deps.runtime = sandboxes
	h.sync(pod, false)

	if sandboxes.last == nil || sandboxes.last.Hostname != "web.example.com" {
		t.Fatalf("sandbox config %v, want hostname web.example.com", sandboxes.last)
	}
	cfg := rec.configs["a"]
	if cfg == nil {
		t.Fatal("container not created")
	}
	for _, m := range cfg.Mounts {
		if m.ContainerPath != "/etc/hosts" {
			continue
		}
		hosts, err := os.ReadFile(m.HostPath)
		if want := critesting.FakePodSandboxIPs[0] + "\tweb.example.com\n"; err != nil || !strings.HasSuffix(string(hosts), want) {
			t.Errorf("hosts file %q (%v), want it to end in %q", hosts, err, want)
		}
		return
	}
	t.Error("no /etc/hosts mount")
}
