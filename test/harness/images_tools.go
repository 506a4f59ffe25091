package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
)

// hostToolFiles copies dynamically linked programs of this machine into layer entries, with
// every shared library `ldd` says they load (and the dynamic loader), each at the path the
// loader looks for it, plus the directories that hold them. tools maps the path in the image
// to the program on the host.
func hostToolFiles(ctx context.Context, tools map[string]string) ([]tarFile, error) {
	libs := map[string]bool{}
	var files []tarFile
	names := make([]string, 0, len(tools))
	for name := range tools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		host := tools[name]
		data, err := os.ReadFile(host)
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", host, err)
		}
		files = append(files, tarFile{name: name, mode: 0o755, data: data})
		out, err := exec.CommandContext(ctx, "ldd", host).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", host, err)
		}
		for _, lib := range lddPaths(string(out)) {
			libs[lib] = true
		}
	}
	paths := make([]string, 0, len(libs))
	for lib := range libs {
		paths = append(paths, lib)
	}
	sort.Strings(paths)
	for _, lib := range paths {
		data, err := os.ReadFile(lib) // through symlinks: the image gets the file itself
		if err != nil {
			return nil, fmt.Errorf("library %s: %w", lib, err)
		}
		files = append(files, tarFile{name: strings.TrimPrefix(lib, "/"), mode: 0o755, data: data})
	}
	return append(parentDirs(files), files...), nil
}

// lddPaths returns the absolute library paths in ldd's output: "libz.so.1 => /lib/.../libz.so.1
// (0x...)" and the loader's "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
func lddPaths(out string) []string {
	var paths []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		p, _, _ := strings.Cut(line, " ")
		if strings.HasPrefix(p, "/") {
			paths = append(paths, p)
		}
	}
	return paths
}

// parentDirs returns directory entries for every parent of the given files, parents first.
func parentDirs(files []tarFile) []tarFile {
	seen := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f.name); d != "." && d != "/"; d = path.Dir(d) {
			seen[d] = true
		}
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs) // a parent sorts before its children
	out := make([]tarFile, 0, len(dirs))
	for _, d := range dirs {
		out = append(out, tarFile{name: d, dir: true, mode: 0o755})
	}
	return out
}
