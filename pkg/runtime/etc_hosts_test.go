package runtime

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestHostsFile(t *testing.T) {
	const localhost = "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n"
	aliases := []v1.HostAlias{{IP: "10.9.9.9", Hostnames: []string{"foo", "foo.local"}}}
	for _, tc := range []struct {
		name    string
		mutate  func(*v1.Pod)
		ips     []string
		want    string
		wantErr string
	}{
		{name: "pod name", ips: []string{"10.1.0.5"}, want: localhost + "10.1.0.5\tweb-0\n"},
		{name: "hostname, subdomain and two families", ips: []string{"10.1.0.5", "fd01::5"},
			mutate: func(p *v1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "db", "sub" },
			want:   localhost + "10.1.0.5\tdb.sub.ns.svc.cluster.local\tdb\nfd01::5\tdb.sub.ns.svc.cluster.local\tdb\n"},
		{name: "long name truncated", ips: []string{"10.1.0.5"},
			mutate: func(p *v1.Pod) { p.Name = strings.Repeat("a", 62) + "-b" },
			want:   localhost + "10.1.0.5\t" + strings.Repeat("a", 62) + "\n"},
		{name: "host aliases", ips: []string{"10.1.0.5"},
			mutate: func(p *v1.Pod) { p.Spec.HostAliases = aliases },
			want:   localhost + "10.1.0.5\tweb-0\n\n# Entries added by HostAliases.\n10.9.9.9\tfoo\tfoo.local\n"},
		{name: "host network", ips: []string{"192.168.0.1"},
			mutate: func(p *v1.Pod) { p.Spec.HostNetwork, p.Spec.HostAliases = true, aliases },
			want:   "# Kubernetes-managed hosts file (host network).\n127.0.0.1 node\n\n# Entries added by HostAliases.\n10.9.9.9\tfoo\tfoo.local\n"},
		{name: "hostnameOverride: that name, no FQDN even with a subdomain", ips: []string{"10.1.0.5"},
			mutate: func(p *v1.Pod) {
				p.Spec.HostnameOverride, p.Spec.Hostname, p.Spec.Subdomain = ptr.To("web.example.com"), "db", "sub"
			},
			want: localhost + "10.1.0.5\tweb.example.com\n"},
		{name: "invalid hostnameOverride", ips: []string{"10.1.0.5"},
			mutate:  func(p *v1.Pod) { p.Spec.HostnameOverride = ptr.To("Web_1") },
			wantErr: `pod HostnameOverride "Web_1" is not a valid DNS subdomain: `},
		{name: "invalid hostname", ips: []string{"10.1.0.5"},
			mutate:  func(p *v1.Pod) { p.Spec.Hostname = "a.b" },
			wantErr: `pod Hostname "a.b" is not a valid DNS label: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns"}}
			if tc.mutate != nil {
				tc.mutate(p)
			}
			content, err := HostsFile(p, tc.ips, "cluster.local", []byte("127.0.0.1 node\n"))
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q…", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(content); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestMountsEtcHosts(t *testing.T) {
	c := &v1.Container{VolumeMounts: []v1.VolumeMount{{MountPath: "/data"}}}
	if MountsEtcHosts(c) {
		t.Error("no /etc/hosts mount")
	}
	c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{MountPath: "/etc/hosts/"})
	if !MountsEtcHosts(c) {
		t.Error("/etc/hosts mount missed")
	}
}

func TestSandboxHostname(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*v1.Pod)
		want    string
		wantErr string
	}{
		{name: "pod name", want: "web-0"},
		{name: "spec hostname", mutate: func(p *v1.Pod) { p.Spec.Hostname = "db" }, want: "db"},
		{name: "subdomain alone keeps the short name", mutate: func(p *v1.Pod) { p.Spec.Subdomain = "sub" }, want: "web-0"},
		{name: "setHostnameAsFQDN", mutate: func(p *v1.Pod) {
			p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = "sub", ptr.To(true)
		}, want: "web-0.sub.ns.svc.cluster.local"},
		{name: "setHostnameAsFQDN without subdomain", mutate: func(p *v1.Pod) { p.Spec.SetHostnameAsFQDN = ptr.To(true) }, want: "web-0"},
		{name: "FQDN too long", mutate: func(p *v1.Pod) {
			p.Spec.Hostname, p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = strings.Repeat("h", 40), "sub", ptr.To(true)
		}, wantErr: "failed to construct FQDN from pod hostname and cluster domain, FQDN " + strings.Repeat("h", 40) +
			".sub.ns.svc.cluster.local is too long (64 characters is the max, 65 characters requested)"},
		{name: "host network", mutate: func(p *v1.Pod) { p.Spec.HostNetwork = true }, want: ""},
		{name: "hostnameOverride over hostname and pod name", mutate: func(p *v1.Pod) {
			p.Spec.HostnameOverride, p.Spec.Hostname = ptr.To("web.example.com"), "db"
		}, want: "web.example.com"},
		{name: "hostnameOverride keeps its name despite subdomain and setHostnameAsFQDN", mutate: func(p *v1.Pod) {
			p.Spec.HostnameOverride, p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = ptr.To("web"), "sub", ptr.To(true)
		}, want: "web"},
		{name: "hostnameOverride of 64 characters cut to 63 and its trailing dot", mutate: func(p *v1.Pod) {
			p.Spec.HostnameOverride = ptr.To(strings.Repeat("a", 62) + ".b")
		}, want: strings.Repeat("a", 62)},
		{name: "invalid hostnameOverride", mutate: func(p *v1.Pod) { p.Spec.HostnameOverride = ptr.To("-web") },
			wantErr: `pod HostnameOverride "-web" is not a valid DNS subdomain: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{name: "invalid subdomain", mutate: func(p *v1.Pod) { p.Spec.Subdomain = "a.b" },
			wantErr: `pod Subdomain "a.b" is not a valid DNS label: must not contain dots`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns", UID: "u"}}
			if tc.mutate != nil {
				tc.mutate(p)
			}
			cfg, _, err := SandboxConfig(p, 0, PodOptions{DNS: DNSOptions{ClusterDomain: "cluster.local"}})
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Hostname != tc.want {
				t.Errorf("hostname %q, want %q", cfg.Hostname, tc.want)
			}
		})
	}
}
