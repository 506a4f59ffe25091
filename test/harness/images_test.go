package harness

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDebSrcEntries(t *testing.T) {
	const sources822 = `Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main contrib

Types: deb
URIs: https://vendor.example/apt
Suites: cloud-sdk-bookworm
Components: main
`
	got := debSrcFrom822(sources822, "bookworm")
	want := []string{
		"deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian bookworm main",
		"deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian bookworm-updates main",
		"deb-src http://mirror.example/debian-security bookworm-security main contrib",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("deb822:\n got %q\nwant %q", got, want)
	}
	const list = "# comment\ndeb http://mirror.example/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] https://vendor.example/apt nodistro main\ndeb-src http://x bookworm main\ndeb [signed-by=/k.gpg] http://mirror.example/debian bookworm-updates main\n"
	got = debSrcFromList(list, "bookworm")
	want = []string{
		"deb-src http://mirror.example/debian bookworm main",
		"deb-src [signed-by=/k.gpg] http://mirror.example/debian bookworm-updates main",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("one-line:\n got %q\nwant %q", got, want)
	}
}

func TestEditKconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".config")
	in := "# CONFIG_STATIC is not set\nCONFIG_TC=y\nCONFIG_ASH=y\n# CONFIG_FOO_BAR is not set\n"
	if err := os.WriteFile(path, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := editKconfig(path, map[string]bool{"CONFIG_STATIC": true, "CONFIG_NEW": true}, []string{"CONFIG_TC"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "CONFIG_STATIC=y\n# CONFIG_TC is not set\nCONFIG_ASH=y\n# CONFIG_FOO_BAR is not set\nCONFIG_NEW=y\n"
	if string(got) != want {
		t.Errorf("edited .config:\n%s\nwant:\n%s", got, want)
	}
}

func TestLddPaths(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f1)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f3)\n"
	want := []string{"/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if got := lddPaths(out); !reflect.DeepEqual(got, want) {
		t.Errorf("lddPaths = %q, want %q", got, want)
	}
	if got := lddPaths("\tstatically linked\n"); len(got) != 0 {
		t.Errorf("a static binary has no libraries, got %q", got)
	}
}

func TestParentDirs(t *testing.T) {
	dirs := parentDirs([]tarFile{{name: "usr/bin/curl"}, {name: "lib/x86_64-linux-gnu/libz.so.1"}, {name: "top"}})
	var got []string
	for _, d := range dirs {
		if !d.dir {
			t.Errorf("%s is not a directory entry", d.name)
		}
		got = append(got, d.name)
	}
	want := []string{"lib", "lib/x86_64-linux-gnu", "usr", "usr/bin"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parentDirs = %q, want %q", got, want)
	}
}

func TestConformanceRepoList(t *testing.T) {
	list := ConformanceRepoList()
	for _, key := range []string{"promoterE2eRegistry", "buildImageRegistry", "invalidRegistry", "gcEtcdRegistry", "gcRegistry",
		"sigStorageRegistry", "privateRegistry", "dockerLibraryRegistry", "cloudProviderGcpRegistry"} {
		found := false
		for _, line := range strings.Split(list, "\n") {
			if v, ok := strings.CutPrefix(line, key+": "); ok {
				found = true
				if !strings.HasPrefix(v, RegistryAddr) && !strings.HasPrefix(v, AuthRegistry) {
					t.Errorf("%s points at %q, not at a local registry", key, v)
				}
			}
		}
		if !found {
			t.Errorf("repo list lacks %s:\n%s", key, list)
		}
	}
	if !strings.Contains(list, "gcRegistry: "+RegistryAddr+"\n") {
		t.Errorf("gcRegistry must be the registry's root (pause is at its top level):\n%s", list)
	}
}

func TestLocalRepoTag(t *testing.T) {
	tests := []struct {
		ref, repo, tag string
		ok             bool
	}{
		{RegistryAddr + "/e2e-test-images/agnhost:2.66.1", "e2e-test-images/agnhost", "2.66.1", true},
		{RegistryAddr + "/pause:3.10.2", "pause", "3.10.2", true},
		{AuthRegistry + "/k8s-authenticated-test/agnhost:2.6", "", "", false},
		{"registry.k8s.io/pause:3.10.2", "", "", false},
	}
	for _, tt := range tests {
		repo, tag, ok := localRepoTag(tt.ref)
		if repo != tt.repo || tag != tt.tag || ok != tt.ok {
			t.Errorf("localRepoTag(%q) = %q, %q, %v; want %q, %q, %v", tt.ref, repo, tag, ok, tt.repo, tt.tag, tt.ok)
		}
	}
}
