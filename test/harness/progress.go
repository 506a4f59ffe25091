package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// progressEvery is how long a build may go on without a line before it says where it stands.
const progressEvery = 30 * time.Second

// buildProgress reports one build as it goes, through Logf: a line as it starts, one per
// binary as it appears (when there are several), one every progressEvery while nothing else
// was said, and one as it ends; the finished build is noted for the run's summary.
//
// A quiet build is one the harness runs every time, such as the agent's, which the go tool's
// cache turns into a few seconds' link: it says nothing, and is noted nowhere, unless the go
// tool compiles a package.
type buildProgress struct {
	logf  func(format string, args ...any)
	now   func() time.Time
	rec   *buildRecord // may be nil
	what  string       // "upstream v1.37.1", "csi-provisioner v6.3.0"
	items []string     // the binaries it makes
	about string       // how long it takes, when known: "about 12 minutes on 2 cores"
	quiet bool

	mu        sync.Mutex
	start     time.Time
	lastSaid  time.Time
	announced bool
	phase     string // what it is doing besides compiling: "downloading modules", "linking e2e.test"
	total     int    // packages the go tool is expected to compile; 0 when not known
	compiled  int
	done      []string          // items built, in the order they appeared
	watch     map[string]string // file whose appearance means an item is built -> the item
	ended     bool

	stop    chan struct{}
	stopped chan struct{}
}

// startBuild begins reporting a build that the harness runs only when its result is not
// cached: it says so at once (with about, how long it takes, if known), then keeps saying
// where it stands until end.
func (c *Config) startBuild(what string, items []string, about string) *buildProgress {
	p := c.newBuildProgress(what, items, false)
	p.about = about
	p.announce()
	p.run()
	return p
}

// startQuietBuild begins reporting a build the harness runs every time: it says nothing
// unless the go tool compiles something.
func (c *Config) startQuietBuild(what string, items ...string) *buildProgress {
	p := c.newBuildProgress(what, items, true)
	p.run()
	return p
}

func (c *Config) newBuildProgress(what string, items []string, quiet bool) *buildProgress {
	logf := c.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	now := time.Now()
	return &buildProgress{logf: logf, now: time.Now, rec: c.record, what: what, items: items, quiet: quiet,
		start: now, lastSaid: now}
}

// run starts the goroutine that watches for binaries and says where the build stands.
func (p *buildProgress) run() {
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.poll()
				p.beat()
			}
		}
	}()
}

// say logs a line of the build and notes when; p.mu is held.
func (p *buildProgress) say(format string, args ...any) {
	p.logf(p.what+": "+format, args...)
	p.lastSaid = p.now()
}

// announce says that the build starts; p.mu may not be held.
func (p *buildProgress) announce() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.announceLocked()
}

func (p *buildProgress) announceLocked() {
	if p.announced {
		return
	}
	p.announced = true
	about := ""
	if p.about != "" {
		about = ", " + p.about
	}
	switch {
	case p.quiet:
		p.say("compiling (changed sources, or not yet in the Go build cache)")
	case len(p.items) > 1:
		p.say("building %d binaries (%s)%s, once: later runs take them from the cache", len(p.items), strings.Join(p.items, ", "), about)
	default:
		p.say("building%s, once: later runs take it from the cache", about)
	}
}

// setPhase names what the build does now besides compiling ("" when compiling).
func (p *buildProgress) setPhase(phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase = phase
}

// expect sets how many packages the go tool is expected to compile, and says so.
func (p *buildProgress) expect(packages int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total = packages
	if packages > 0 && !p.quiet {
		p.say("%d packages to compile", packages)
	}
}

// watchFiles marks an item built when its file appears: file -> item.
func (p *buildProgress) watchFiles(files map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watch = files
}

// compiling counts one package the go tool reports compiling.
func (p *buildProgress) compiling(pkg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.compiled++
	p.announceLocked()
}

// built notes that an item is built, once, with a line when the build makes several.
func (p *buildProgress) built(item string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.builtLocked(item)
}

func (p *buildProgress) builtLocked(item string) {
	for _, d := range p.done {
		if d == item {
			return
		}
	}
	p.done = append(p.done, item)
	if len(p.items) > 1 && !p.quiet {
		p.say("[%d/%d] %s built (%s so far)", len(p.done), len(p.items), item, roundDuration(p.now().Sub(p.start)))
	}
}

// poll marks built the watched files that have appeared.
func (p *buildProgress) poll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for file, item := range p.watch {
		if st, err := os.Stat(file); err == nil && st.Mode().IsRegular() {
			p.builtLocked(item)
			delete(p.watch, file)
		}
	}
}

// beat says where the build stands if nothing was said for progressEvery.
func (p *buildProgress) beat() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.ended || (p.quiet && !p.announced) || now.Sub(p.lastSaid) < progressEvery {
		return
	}
	p.say("%s", p.standingLocked(now))
}

// standingLocked is where the build stands, for the line said every progressEvery.
func (p *buildProgress) standingLocked(now time.Time) string {
	var parts []string
	if p.phase != "" {
		parts = append(parts, p.phase)
	}
	switch {
	case p.total > 0 && p.compiled < p.total:
		parts = append(parts, fmt.Sprintf("%d/%d packages compiled", p.compiled, p.total))
	case p.compiled > 0:
		parts = append(parts, fmt.Sprintf("%d packages compiled", p.compiled))
	}
	if len(p.items) > 1 && (p.compiled > 0 || len(p.done) > 0) {
		parts = append(parts, fmt.Sprintf("%d/%d binaries built", len(p.done), len(p.items)))
	}
	if len(parts) == 0 {
		parts = append(parts, "building")
	}
	return fmt.Sprintf("%s (%s so far)", strings.Join(parts, ", "), roundDuration(now.Sub(p.start)))
}

// end stops the reports; after a successful build it says how long it took and notes it
// for the summary.
func (p *buildProgress) end(err error) {
	if p.stop != nil {
		close(p.stop)
		<-p.stopped
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	if err != nil || (p.quiet && p.compiled == 0) {
		return
	}
	for _, item := range p.items {
		p.builtLocked(item)
	}
	took := p.now().Sub(p.start)
	if p.compiled > 0 {
		p.say("built in %s (%d packages compiled)", roundDuration(took), p.compiled)
	} else {
		p.say("built in %s", roundDuration(took))
	}
	p.rec.noteBuild(p.what, p.builtLabel(), took)
}

// builtLabel names what the build made, for the summary: its binaries, or how many.
func (p *buildProgress) builtLabel() string {
	switch {
	case len(p.items) == 0:
		return p.what
	case len(p.items) <= 3:
		return strings.Join(p.items, ", ")
	default:
		return fmt.Sprintf("%s (%d binaries)", p.what, len(p.items))
	}
}

// roundDuration rounds d for a progress line: to the second, or to 100ms under 10 seconds.
func roundDuration(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// runBuild runs a build command (argv[0] is "go", or "nice" in front of it) in dir outside
// any workspace, telling p each package the go tool reports compiling (the command should
// carry -v); a failure carries the tail of the output other than package names.
func runBuild(ctx context.Context, dir string, env []string, p *buildProgress, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	w := &buildOutput{p: p}
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	w.flush()
	if err != nil {
		return fmt.Errorf("%s in %s: %w\n%s", strings.Join(buildVerb(argv), " "), dir, err, tail(w.other.Bytes(), 4000))
	}
	return nil
}

// buildVerb is the go tool and its subcommand in argv, for an error's context.
func buildVerb(argv []string) []string {
	for i, a := range argv {
		if a == "go" && i+1 < len(argv) {
			return argv[i : i+2]
		}
	}
	return argv[:1]
}

// buildOutput splits a build's output into the packages the go tool compiles (-v), which
// go to the progress, and the rest, whose tail an error shows.
type buildOutput struct {
	p       *buildProgress
	partial []byte
	other   bytes.Buffer
}

func (w *buildOutput) Write(b []byte) (int, error) {
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	return len(b), nil
}

func (w *buildOutput) flush() {
	if len(w.partial) > 0 {
		w.line(string(w.partial))
		w.partial = nil
	}
}

func (w *buildOutput) line(l string) {
	if isPackageLine(l) {
		w.p.compiling(l)
		return
	}
	w.other.WriteString(l + "\n")
	if w.other.Len() > 64<<10 { // keep the tail only
		rest := append([]byte(nil), w.other.Bytes()[w.other.Len()-16<<10:]...)
		w.other.Reset()
		w.other.Write(rest)
	}
}

// isPackageLine reports whether a line of `go build -v` names a package it compiles, rather
// than being an error ("file.go:3:2: ..."), a header ("# pkg") or a note ("go: downloading").
func isPackageLine(l string) bool {
	return l != "" && !strings.HasPrefix(l, "#") && !strings.ContainsAny(l, " \t:")
}

// packagesToCompile counts the packages a build of pkgs in dir with the given flags would
// compile (the stale ones, as go list sees them, but for a main package whose only
// staleness is its missing binary), or 0 when go list cannot tell: it only sharpens the
// progress lines, so a failure here is left to the build to report.
func packagesToCompile(ctx context.Context, dir string, env, flags []string, pkgs ...string) int {
	const tmpl = `{{if and .Stale (ne .StaleReason "not installed but available in build cache")}}{{.ImportPath}}{{end}}`
	args := append(append([]string{"list", "-deps", "-f", tmpl}, flags...), pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	out, err := cmd.Output()
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" {
			n++
		}
	}
	return n
}

// binaryFiles maps where `go build -o dir/` writes each package's binary to its name.
func binaryFiles(dir string, pkgs map[string]string) map[string]string {
	out := map[string]string{}
	for name, pkg := range pkgs {
		out[filepath.Join(dir, goBinaryName(pkg))] = name
	}
	return out
}

// goBinaryName is the file the go tool names a main package's binary: the last element of
// its path that is not a major version suffix (go.etcd.io/etcd/server/v3 builds "server").
func goBinaryName(pkg string) string {
	elems := strings.Split(pkg, "/")
	base := elems[len(elems)-1]
	if len(elems) > 1 && len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		base = elems[len(elems)-2]
	}
	return base
}
