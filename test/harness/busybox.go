package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// DebianBusybox is Debian's static busybox (package busybox-static), the default binary of
// the harness's busybox and agnhost images. Debian patches its ash to drop, on start, every
// environment entry whose name is not a shell identifier (data-1=value-1); upstream busybox,
// which the upstream e2e images ship, keeps them and passes them on to the commands it
// runs. EnsureBusybox builds the upstream one.
const DebianBusybox = "/bin/busybox"

// busyboxDisabled are applets of the upstream defconfig that are left out of the build:
// tc needs kernel headers older than some distributions ship.
var busyboxDisabled = []string{"CONFIG_TC"}

// EnsureBusybox builds upstream busybox (the release Debian packages, from Debian's pristine
// upstream tarball, without Debian's patches) statically with the upstream defconfig into the
// cache, unless a previous run did, and returns the binary's path. The source comes through
// apt (`apt-get source`) from the deb-src counterparts of this machine's own Debian sources;
// it needs gcc, make and libc6-dev. About three minutes on 2 cores the first time.
func (c *Config) EnsureBusybox(ctx context.Context) (_ string, err error) {
	root := filepath.Join(c.CacheDir, "busybox")
	bin := filepath.Join(root, "bin", "busybox")
	built := func() bool { st, err := os.Stat(bin); return err == nil && st.Mode()&0o111 != 0 }
	if built() {
		return bin, nil
	}
	unlock, err := c.lockBuild("busybox")
	if err != nil {
		return "", err
	}
	defer unlock()
	if built() { // built by the process we waited for
		return bin, nil
	}
	for _, tool := range []string{"gcc", "make", "tar", "bzip2", "apt-get"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("busybox from source needs %s: %w", tool, err)
		}
	}
	src := filepath.Join(root, "src")
	if err := os.RemoveAll(src); err != nil {
		return "", err
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	p := c.startBuild("upstream busybox", []string{"busybox"}, "about 3 minutes on 2 cores")
	defer func() { p.end(err) }()
	p.setPhase("downloading its source")
	tarball, err := c.downloadDebianOrig(ctx, "busybox", src)
	if err != nil {
		return "", err
	}
	tree := filepath.Join(src, "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return "", err
	}
	if _, err := run(ctx, "tar", "-xf", tarball, "-C", tree, "--strip-components=1"); err != nil {
		return "", err
	}
	p.setPhase("configuring")
	if _, err := runIn(ctx, tree, nil, "make", "defconfig"); err != nil {
		return "", err
	}
	if err := editKconfig(filepath.Join(tree, ".config"), map[string]bool{"CONFIG_STATIC": true}, busyboxDisabled); err != nil {
		return "", err
	}
	if _, err := runIn(ctx, tree, nil, "make", "oldconfig"); err != nil {
		return "", err
	}
	p.setPhase("compiling")
	if _, err := runIn(ctx, tree, nil, "make", "-j"+strconv.Itoa(runtime.NumCPU()), "busybox"); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(tree, "busybox"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(bin+".tmp", data, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		return "", err
	}
	_ = os.RemoveAll(src)
	return bin, nil
}

// editKconfig sets the given options to y and unsets the disabled ones in a kconfig .config.
func editKconfig(path string, enable map[string]bool, disable []string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	off := map[string]bool{}
	for _, o := range disable {
		off[o] = true
	}
	var out strings.Builder
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		name := kconfigName(line)
		switch {
		case name != "" && enable[name]:
			line, seen[name] = name+"=y", true
		case name != "" && off[name]:
			line = "# " + name + " is not set"
		}
		out.WriteString(line + "\n")
	}
	for name := range enable {
		if !seen[name] {
			out.WriteString(name + "=y\n")
		}
	}
	return os.WriteFile(path, []byte(out.String()), 0o644)
}

var kconfigLine = regexp.MustCompile(`^(?:# )?(CONFIG_[A-Za-z0-9_]+)(?:=| is not set$)`)

func kconfigName(line string) string {
	if m := kconfigLine.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return ""
}

// downloadDebianOrig fetches the source package pkg with `apt-get source --download-only`
// into dir, using deb-src entries made from this machine's own Debian sources in a private
// apt state (the system's apt configuration and lists are left as they are), and returns
// the path of its pristine upstream tarball.
func (c *Config) downloadDebianOrig(ctx context.Context, pkg, dir string) (string, error) {
	srcs, err := debSrcEntries()
	if err != nil {
		return "", err
	}
	aptDir := filepath.Join(dir, "apt")
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(aptDir, d), 0o755); err != nil {
			return "", err
		}
	}
	list := filepath.Join(aptDir, "sources.list")
	if err := os.WriteFile(list, []byte(strings.Join(srcs, "\n")+"\n"), 0o644); err != nil {
		return "", err
	}
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + list,
		"-o", "Dir::Etc::SourceParts=/nonexistent",
		"-o", "Dir::State::Lists=" + filepath.Join(aptDir, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(aptDir, "cache"),
		"-o", "APT::Sandbox::User=root",
	}
	if _, err := runIn(ctx, dir, nil, "apt-get", append(opts, "update", "-qq")...); err != nil {
		return "", err
	}
	if _, err := runIn(ctx, dir, nil, "apt-get", append(opts, "source", "--download-only", "-qq", pkg)...); err != nil {
		return "", err
	}
	matches, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.orig.tar.*"))
	if len(matches) != 1 {
		return "", fmt.Errorf("apt-get source %s: want one upstream tarball, found %q", pkg, matches)
	}
	return matches[0], nil
}

// debSrcEntries turns the Debian "deb" entries of this machine's apt sources (one-line and
// deb822 formats) for its own release into "deb-src" lines.
func debSrcEntries() ([]string, error) {
	codename := osReleaseField("/etc/os-release", "VERSION_CODENAME")
	if codename == "" {
		return nil, fmt.Errorf("deb-src: no VERSION_CODENAME in /etc/os-release")
	}
	var files []string
	if _, err := os.Stat("/etc/apt/sources.list"); err == nil {
		files = append(files, "/etc/apt/sources.list")
	}
	more, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append(files, more...)
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		switch {
		case strings.HasSuffix(f, ".sources"):
			out = append(out, debSrcFrom822(string(data), codename)...)
		case strings.HasSuffix(f, ".list"):
			out = append(out, debSrcFromList(string(data), codename)...)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("deb-src: no Debian source of release %q in this machine's apt sources", codename)
	}
	return out, nil
}

// debianSuite reports whether suite belongs to the release codename (bookworm,
// bookworm-updates, bookworm-security).
func debianSuite(suite, codename string) bool {
	return suite == codename || strings.HasPrefix(suite, codename+"-")
}

func debSrcFromList(data, codename string) []string {
	var out []string
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "deb" {
			continue
		}
		i := 1
		if strings.HasPrefix(f[1], "[") { // options: [signed-by=... arch=...]
			for i < len(f) && !strings.HasSuffix(f[i], "]") {
				i++
			}
			i++
		}
		if i+2 > len(f) || !debianSuite(f[i+1], codename) {
			continue
		}
		out = append(out, "deb-src "+strings.Join(f[1:], " "))
	}
	return out
}

func debSrcFrom822(data, codename string) []string {
	var out []string
	for _, stanza := range strings.Split(data, "\n\n") {
		fields := map[string]string{}
		sc := bufio.NewScanner(strings.NewReader(stanza))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if ok && !strings.HasPrefix(line, " ") {
				fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		if !strings.Contains(" "+fields["Types"]+" ", " deb ") {
			continue
		}
		comps := fields["Components"]
		if comps == "" {
			continue
		}
		for _, uri := range strings.Fields(fields["URIs"]) {
			for _, suite := range strings.Fields(fields["Suites"]) {
				if debianSuite(suite, codename) {
					opt := ""
					if sb := fields["Signed-By"]; sb != "" && !strings.Contains(sb, "\n") {
						opt = "[signed-by=" + sb + "] "
					}
					out = append(out, "deb-src "+opt+uri+" "+suite+" "+comps)
				}
			}
		}
	}
	return out
}

func osReleaseField(path, key string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

// runIn runs a command in dir and returns its combined output; a failure carries its tail.
func runIn(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out, 3000))
	}
	return string(out), nil
}
