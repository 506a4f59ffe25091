package harness

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

func TestSplitRule(t *testing.T) {
	tests := []struct {
		name string
		line string
		want []string
	}{
		{name: "plain", line: "-A POSTROUTING -j CNI-abc", want: []string{"-A", "POSTROUTING", "-j", "CNI-abc"}},
		{name: "quoted comment", line: `-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ`,
			want: []string{"-A", "POSTROUTING", "-m", "comment", "--comment", "CNI portfwd requiring masquerade", "-j", "CNI-HOSTPORT-MASQ"}},
		{name: "escaped quotes in comment", line: `-A POSTROUTING -s 10.244.0.5/32 -m comment --comment "name: \"nodeagent-pods\" id: \"abc\"" -j CNI-1`,
			want: []string{"-A", "POSTROUTING", "-s", "10.244.0.5/32", "-m", "comment", "--comment", `name: "nodeagent-pods" id: "abc"`, "-j", "CNI-1"}},
		{name: "empty quoted", line: `-A X --comment "" -j Y`, want: []string{"-A", "X", "--comment", "", "-j", "Y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := splitRule(tt.line); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("splitRule(%q) = %q, want %q", tt.line, got, tt.want)
			}
		})
	}
}

func TestKubeVersionOf(t *testing.T) {
	base := "module x\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/api v0.37.1\n\tk8s.io/client-go v0.37.1\n\tgithub.com/other/mod v1.2.3\n"
	tests := []struct {
		name, gomod, want, wantErr string
	}{
		{name: "one release", gomod: base + ")\n", want: "v1.37.1"},
		{name: "mixed releases", gomod: base + "\tk8s.io/kubelet v0.36.0\n)\n", wantErr: "pin them to one release"},
		{name: "no staging module", gomod: "module x\n\ngo 1.26.0\n", wantErr: "no k8s.io staging module"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := modfile.Parse("go.mod", []byte(tt.gomod), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kubeVersionOf(f)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to say %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("kubeVersionOf = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// The repository's own go.mod pins one release: the harness builds exactly that.
func TestRepoPinsOneRelease(t *testing.T) {
	v, err := KubeVersion("../..")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "v1.37.") {
		t.Fatalf("pinned release %s, want a 1.37 patch release", v)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/var/lib/a\040b\011c`); got != "/var/lib/a b\tc" {
		t.Fatalf("unescapeMount = %q", got)
	}
}

func TestConfigRefusesDangerousRunDir(t *testing.T) {
	for _, dir := range []string{"/", "/var", "relative/dir"} {
		cfg := &Config{RepoDir: "/repo", RunDir: dir, CacheDir: "/cache"}
		if err := cfg.Complete(); err == nil {
			t.Errorf("run dir %q accepted, want refused", dir)
		}
	}
}

func TestAgentRootFSAndExtraConfig(t *testing.T) {
	base := func() *Config {
		return &Config{RepoDir: "/repo", RunDir: "/tmp/nodeagent-test-run", CacheDir: "/cache", Agent: AgentNodeagent,
			Runtime: RuntimeContainerd, PodNetwork: PodNetworkHarness, NodeCount: 1}
	}
	for _, tc := range []struct {
		name string
		mut  func(*Config)
	}{
		{"a negative size", func(c *Config) { c.AgentRootFS = -1 }},
		{"several nodes", func(c *Config) { c.AgentRootFS = 300 << 20; c.NodeCount = 2; c.PodNetwork = PodNetworkAgent }},
		{"kubeadm", func(c *Config) { c.AgentRootFS = 300 << 20; c.Kubeadm = true; c.NodeCount = 3; c.PodNetwork = "" }},
		{"a negative runtime root size", func(c *Config) { c.RuntimeRootFS = -1 }},
		{"runtime root on several nodes", func(c *Config) { c.RuntimeRootFS = 300 << 20; c.NodeCount = 2; c.PodNetwork = PodNetworkAgent }},
		{"extra config with kubeadm", func(c *Config) { c.AgentConfigExtra = "x: y\n"; c.Kubeadm = true; c.NodeCount = 3; c.PodNetwork = "" }},
	} {
		cfg := base()
		tc.mut(cfg)
		if err := cfg.Complete(); err == nil {
			t.Errorf("%s: accepted, want refused", tc.name)
		}
	}

	kubeadm := base()
	kubeadm.Kubeadm, kubeadm.NodeCount, kubeadm.PodNetwork = true, 3, ""
	if err := kubeadm.Complete(); err != nil {
		t.Fatalf("the kubeadm cases are refused for another reason: %v", err)
	}

	cfg := base()
	cfg.AgentRootFS, cfg.RuntimeRootFS, cfg.AgentConfigExtra = 300<<20, 600<<20, "evictionHard: {nodefs.available: 40%}\n"
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.AgentArgs(), "--config-dir=/tmp/nodeagent-test-run/agent/config.d") {
		t.Errorf("agent args %q: no --config-dir with the extra configuration", cfg.AgentArgs())
	}
	if got, want := agentConfigDropin(cfg.AgentConfigExtra), "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard: {nodefs.available: 40%}\n"; got != want {
		t.Errorf("drop-in = %q, want %q", got, want)
	}
	if args := base().AgentArgs(); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--config-dir") }) {
		t.Errorf("agent args %q: a --config-dir without extra configuration", args)
	}
}

func TestContainerdMetricsAddress(t *testing.T) {
	for _, runtime := range []string{RuntimeContainerd, RuntimeContainerdDebian} {
		cfg := &Config{RunDir: "/tmp/nodeagent-test-run", Runtime: runtime}
		if got := cfg.containerdConfig("/runc"); strings.Contains(got, "[metrics]") {
			t.Errorf("%s: a metrics table without an address:\n%s", runtime, got)
		}
		cfg.RuntimeMetricsAddr = "127.0.0.1:4321"
		got := cfg.containerdConfig("/runc")
		// Its own table at the end, after every plugin's (TOML puts what follows a table
		// header in that table).
		if !strings.HasSuffix(got, "\n[metrics]\n  address = \"127.0.0.1:4321\"\n") {
			t.Errorf("%s: no metrics table of its own at the end:\n%s", runtime, got)
		}
	}
}
