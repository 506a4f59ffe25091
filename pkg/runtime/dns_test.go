package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestDNSConfig(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("# host\nnameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := DNSOptions{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", ResolvConf: resolv}
	five := "2"
	tests := []struct {
		name string
		mut  func(*v1.Pod)
		opts DNSOptions
		want *runtimeapi.DNSConfig
	}{
		{name: "ClusterFirst", opts: opts, want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"},
			Searches: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:5"}}},
		{name: "ClusterFirst on the host network is Default", opts: opts, mut: func(p *v1.Pod) { p.Spec.HostNetwork = true },
			want: &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"}, Searches: []string{"corp.example"}, Options: []string{"edns0"}}},
		{name: "ClusterFirstWithHostNet", opts: opts, mut: func(p *v1.Pod) { p.Spec.HostNetwork = true; p.Spec.DNSPolicy = v1.DNSClusterFirstWithHostNet },
			want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"},
				Searches: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:5"}}},
		{name: "ClusterFirst without cluster DNS is Default", opts: DNSOptions{ResolvConf: resolv},
			want: &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"}, Searches: []string{"corp.example"}, Options: []string{"edns0"}}},
		{name: "None takes dnsConfig only", opts: opts, mut: func(p *v1.Pod) {
			p.Spec.DNSPolicy = v1.DNSNone
			p.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &five}}}
		}, want: &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []string{"ndots:2"}}},
		{name: "dnsConfig options override", opts: opts, mut: func(p *v1.Pod) {
			p.Spec.DNSConfig = &v1.PodDNSConfig{Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &five}, {Name: "rotate"}}}
		}, want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"},
			Searches: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:2", "rotate"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
			if tt.mut != nil {
				tt.mut(pod)
			}
			got, _, err := DNSConfig(pod, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Servers, tt.want.Servers) || !reflect.DeepEqual(got.Searches, tt.want.Searches) || !reflect.DeepEqual(got.Options, tt.want.Options) {
				t.Errorf("DNSConfig = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSandboxConfigCarriesIdentity(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "x"}},
		Spec: v1.PodSpec{HostPID: true, Containers: []v1.Container{{Name: "c", Ports: []v1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}}}}}
	cfg, _, err := SandboxConfig(pod, 2, PodOptions{PodLogsDir: "/var/log/pods", CgroupParent: "/kubepods"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LogDirectory != "/var/log/pods/ns_web_u1" || cfg.Hostname != "web" || cfg.Metadata.Attempt != 2 {
		t.Errorf("log dir %q hostname %q attempt %d", cfg.LogDirectory, cfg.Hostname, cfg.Metadata.Attempt)
	}
	ref, ok := podRefFromLabels(cfg.Labels)
	if !ok || ref.UID != "u1" || ref.Name != "web" || ref.Namespace != "ns" || cfg.Labels["app"] != "x" {
		t.Errorf("labels %v", cfg.Labels)
	}
	ns := cfg.Linux.SecurityContext.NamespaceOptions
	if ns.Pid != runtimeapi.NamespaceMode_NODE || ns.Network != runtimeapi.NamespaceMode_POD || cfg.Linux.CgroupParent != "/kubepods" {
		t.Errorf("namespaces %v cgroup parent %q", ns, cfg.Linux.CgroupParent)
	}
	if len(cfg.PortMappings) != 1 || cfg.PortMappings[0].HostPort != 8080 {
		t.Errorf("port mappings %v", cfg.PortMappings)
	}
	c := ContainerConfig(pod, &pod.Spec.Containers[0], ContainerInputs{Image: "img", RestartCount: 3})
	if c.LogPath != "c/3.log" || c.Annotations[AnnotationRestartCount] != "3" || c.Labels[LabelContainer] != "c" {
		t.Errorf("container config %v", c)
	}
}

func TestParseImage(t *testing.T) {
	for _, tt := range []struct {
		in, want, registry string
		bad                bool
	}{
		{in: "busybox", want: "busybox:latest", registry: "index.docker.io"},
		{in: "docker.io/library/busybox:1.37", want: "docker.io/library/busybox:1.37", registry: "index.docker.io"},
		{in: "127.0.0.1:5001/e2e/busybox:1", want: "127.0.0.1:5001/e2e/busybox:1", registry: "127.0.0.1:5001"},
		{in: "NotAValid:Image", bad: true},
	} {
		got, reg, err := ParseImage(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("ParseImage(%q) = %q, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want || reg != tt.registry {
			t.Errorf("ParseImage(%q) = %q %q %v, want %q %q", tt.in, got, reg, err, tt.want, tt.registry)
		}
	}
}

func TestDNSConfigLimits(t *testing.T) {
	long := func(n int, size int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%0*d.example", size, i))
		}
		return out
	}
	opts := DNSOptions{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local"}
	for _, tt := range []struct {
		name         string
		dns          *v1.PodDNSConfig
		opts         DNSOptions
		servers      int
		searches     int
		wantWarnings []string
	}{
		{name: "within limits", dns: &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "1.0.0.1"}}, opts: opts, servers: 3, searches: 3},
		{name: "four nameservers", dns: &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "1.0.0.1", "9.9.9.9"}}, opts: opts, servers: 3, searches: 3,
			wantWarnings: []string{"DNSConfigForming: Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 10.96.0.10 1.1.1.1 1.0.0.1"}},
		{name: "too many search paths", dns: &v1.PodDNSConfig{Searches: long(40, 1)}, opts: opts, servers: 1, searches: 32,
			wantWarnings: []string{"DNSConfigForming: Search Line limits were exceeded"}},
		{name: "search line too long", dns: &v1.PodDNSConfig{Searches: long(10, 250)}, opts: opts, servers: 1, searches: 10,
			wantWarnings: []string{"DNSConfigForming: Search Line limits were exceeded"}},
		{name: "no cluster DNS", opts: DNSOptions{}, servers: 0, searches: 0,
			wantWarnings: []string{`MissingClusterDNS: pod: "p_ns(u)". kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: v1.PodSpec{DNSConfig: tt.dns}}
			got, warnings, err := DNSConfig(pod, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Servers) != tt.servers || len(got.Searches) != tt.searches {
				t.Errorf("%d servers, %d searches; want %d, %d", len(got.Servers), len(got.Searches), tt.servers, tt.searches)
			}
			if line := strings.Join(got.Searches, " "); len(line) > 2048 {
				t.Errorf("search line of %d characters", len(line))
			}
			if len(warnings) != len(tt.wantWarnings) {
				t.Fatalf("warnings %v, want %v", warnings, tt.wantWarnings)
			}
			for i, w := range warnings {
				if got := w.Reason + ": " + w.Message; !strings.HasPrefix(got, tt.wantWarnings[i]) {
					t.Errorf("warning %q, want %q", got, tt.wantWarnings[i])
				}
			}
		})
	}
}
