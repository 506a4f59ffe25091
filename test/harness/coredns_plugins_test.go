package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWithoutPluginImports(t *testing.T) {
	list := "package plugin\n\nimport (\n\t// Include all plugins.\n\t_ \"github.com/coredns/caddy/onevent\"\n" +
		"\t_ \"github.com/coredns/coredns/plugin/acl\"\n\t_ \"github.com/coredns/coredns/plugin/azure\"\n" +
		"\t_ \"github.com/coredns/coredns/plugin/kubernetes\"\n\t_ \"github.com/coredns/coredns/plugin/k8s_external\"\n)\n"
	got, err := withoutPluginImports(list, []string{"azure"})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(list, "\t_ \"github.com/coredns/coredns/plugin/azure\"\n", "", 1)
	if got != want {
		t.Errorf("without azure:\n%s\nwant:\n%s", got, want)
	}
	// A name is a whole plugin: "kubernetes" is not k8s_external, and one missing fails.
	if _, err := withoutPluginImports(list, []string{"kube"}); err == nil {
		t.Error("a plugin not in the list was accepted")
	}
}

// The pinned release's plugin list has every plugin the harness leaves out, and keeps every
// one the Corefiles use (deploy/coredns's and kubeadm's).
func TestCoreDNSPluginsLeftOutOfThePinnedRelease(t *testing.T) {
	mod, err := goModDownload(t.Context(), coreDNSBinary.module+"@"+coreDNSBinary.version)
	if err != nil {
		t.Fatalf("CoreDNS %s from the module proxy: %v", coreDNSBinary.version, err)
	}
	data, err := os.ReadFile(filepath.Join(mod.Dir, coreDNSPluginList))
	if err != nil {
		t.Fatal(err)
	}
	out, err := withoutPluginImports(string(data), coreDNSLeftOut)
	if err != nil {
		t.Fatal(err)
	}
	for _, used := range []string{"errors", "health", "ready", "kubernetes", "prometheus" /* metrics */, "forward", "cache", "loop", "reload", "loadbalance"} {
		dir := used
		if used == "prometheus" {
			dir = "metrics"
		}
		if !strings.Contains(out, `_ "github.com/coredns/coredns/plugin/`+dir+`"`) {
			t.Errorf("plugin %s, which the Corefiles use, is left out", used)
		}
	}
}
