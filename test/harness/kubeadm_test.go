package harness

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// docs splits a multi-document YAML into maps, by kind.
func docs(t *testing.T, s string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, d := range strings.Split(s, "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("%v:\n%s", err, d)
		}
		out[m["kind"].(string)] = m
	}
	return out
}

// TestKubeadmConfigs: the init configuration has kubeadm's four kinds, kube-proxy kept
// off the machine's sysctls and CoreDNS off; the operator's join pins the CA and keeps
// preflight, kind's skips both and sets its provider ID.
func TestKubeadmConfigs(t *testing.T) {
	c := &Config{RepoDir: "../..", RunDir: "/var/lib/nodeagent-harness", Kubeadm: true, NodeCount: 3}
	init := docs(t, c.kubeadmInitConfig())
	for _, kind := range []string{"InitConfiguration", "ClusterConfiguration", "KubeProxyConfiguration", "KubeletConfiguration"} {
		if init[kind] == nil {
			t.Errorf("init config has no %s", kind)
		}
	}
	if got := init["KubeProxyConfiguration"]["conntrack"].(map[string]any)["maxPerCore"]; got != float64(0) {
		t.Errorf("kube-proxy conntrack.maxPerCore %v, want 0", got)
	}
	if got := init["ClusterConfiguration"]["dns"].(map[string]any)["disabled"]; got != true {
		t.Errorf("dns.disabled %v, want true", got)
	}
	if got := init["KubeletConfiguration"]["cgroupDriver"]; got != "cgroupfs" {
		t.Errorf("cgroupDriver %v", got)
	}
	nodes := c.Nodes()
	operator := docs(t, c.kubeadmJoinConfig(nodes[1], c.kindNode(nodes[1]), "sha256:00"))["JoinConfiguration"]
	kind := docs(t, c.kubeadmJoinConfig(nodes[2], c.kindNode(nodes[2]), "sha256:00"))["JoinConfiguration"]
	token := func(m map[string]any) map[string]any {
		return m["discovery"].(map[string]any)["bootstrapToken"].(map[string]any)
	}
	if token(operator)["caCertHashes"] == nil || operator["skipPhases"] != nil {
		t.Errorf("operator's join: %v", operator)
	}
	if token(kind)["unsafeSkipCAVerification"] != true || len(kind["skipPhases"].([]any)) != 1 ||
		!strings.Contains(c.kubeadmJoinConfig(nodes[2], true, ""), "kind://docker/nodeagent/"+nodes[2].Name) {
		t.Errorf("kind's join: %v", kind)
	}
}
