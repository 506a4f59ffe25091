package poddir

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestLayout pins every path to the kubelet's layout: tools and CSI
// drivers outside the agent read these paths.
func TestLayout(t *testing.T) {
	l := New("/var/lib/kubelet/")
	pod := l.Pod("0f1e")
	for _, tc := range []struct {
		name, got, want string
	}{
		{name: "root", got: l.Root(), want: "/var/lib/kubelet"},
		{name: "pods", got: l.PodsDir(), want: "/var/lib/kubelet/pods"},
		{name: "pod", got: pod.Dir(), want: "/var/lib/kubelet/pods/0f1e"},
		{name: "volumes", got: pod.VolumesDir(), want: "/var/lib/kubelet/pods/0f1e/volumes"},
		{name: "volume", got: pod.VolumeDir("kubernetes.io/empty-dir", "cache"), want: "/var/lib/kubelet/pods/0f1e/volumes/kubernetes.io~empty-dir/cache"},
		{name: "subpaths", got: pod.SubPathsDir(), want: "/var/lib/kubelet/pods/0f1e/volume-subpaths"},
		{name: "subpath", got: pod.SubPath("data", "app", 2), want: "/var/lib/kubelet/pods/0f1e/volume-subpaths/data/app/2"},
		{name: "plugins", got: pod.PluginsDir(), want: "/var/lib/kubelet/pods/0f1e/plugins"},
		{name: "containers", got: pod.ContainersDir(), want: "/var/lib/kubelet/pods/0f1e/containers"},
		{name: "container", got: pod.ContainerDir("app"), want: "/var/lib/kubelet/pods/0f1e/containers/app"},
		{name: "etc-hosts", got: pod.EtcHosts(), want: "/var/lib/kubelet/pods/0f1e/etc-hosts"},
		{name: "userns", got: pod.UserNamespace(), want: "/var/lib/kubelet/pods/0f1e/userns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}

func TestPluginNames(t *testing.T) {
	for _, name := range []string{"kubernetes.io/empty-dir", "kubernetes.io/csi", "plain"} {
		esc := EscapePluginName(name)
		if len(esc) == 0 || UnescapePluginName(esc) != name {
			t.Errorf("%q escapes to %q, back to %q", name, esc, UnescapePluginName(esc))
		}
	}
	if got := EscapePluginName("kubernetes.io/secret"); got != "kubernetes.io~secret" {
		t.Errorf("escaped %q, want kubernetes.io~secret", got)
	}
}

func TestValidUID(t *testing.T) {
	for _, tc := range []struct {
		uid  types.UID
		want bool
	}{
		{"6a0b-11", true},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a\x00", false},
	} {
		if got := ValidUID(tc.uid); got != tc.want {
			t.Errorf("ValidUID(%q) = %v, want %v", tc.uid, got, tc.want)
		}
	}
}
