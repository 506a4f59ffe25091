package main

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults systemd uses when a unit does not say.
const (
	defaultRestartSec  = 100 * time.Millisecond
	defaultStopTimeout = 90 * time.Second
)

// errNoUnit is returned for a unit that has no file on the search path.
var errNoUnit = errors.New("no such unit")

// unit is a service unit as its file and drop-ins leave it. Commands and
// variables are kept as written: they are expanded at each start, because
// the environment files they read may change between starts (kubeadm writes
// kubeadm-flags.env and then restarts the kubelet).
type unit struct {
	name        string   // with its suffix: kubelet.service
	path        string   // the unit file
	dropIns     []string // in the order they were applied
	description string
	conditions  []string // ConditionPathExists= values, "!" kept
	execStart   []string // command lines, prefixes kept
	environment []string // Environment= values, each one or more assignments
	envFiles    []string // EnvironmentFile= values, "-" kept
	restart     string   // no, always or on-failure
	restartSec  time.Duration
	stopTimeout time.Duration
}

// unitTypes are the suffixes that make a name a full unit name.
var unitTypes = []string{".service", ".socket", ".target", ".timer", ".mount", ".path", ".slice", ".scope", ".device", ".swap", ".automount"}

// unitName returns the full name for what a user typed: "kubelet" means
// kubelet.service.
func unitName(arg string) string {
	if slices.Contains(unitTypes, filepath.Ext(arg)) {
		return arg
	}
	return arg + ".service"
}

// findUnitFile returns the unit's file in the first directory of the search
// path that has it.
func findUnitFile(searchPath []string, name string) (string, error) {
	for _, dir := range searchPath {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", errNoUnit
}

// findDropIns returns the unit's NAME.d/*.conf files from every directory of
// the search path, ordered by file name. A name found in two directories is
// taken from the earlier one, which is how /etc overrides a package's file.
func findDropIns(searchPath []string, name string) []string {
	byName := map[string]string{}
	for _, dir := range searchPath {
		matches, _ := filepath.Glob(filepath.Join(dir, name+".d", "*.conf"))
		for _, m := range matches {
			if _, seen := byName[filepath.Base(m)]; !seen {
				byName[filepath.Base(m)] = m
			}
		}
	}
	var files []string
	for _, base := range slices.Sorted(maps.Keys(byName)) {
		files = append(files, byName[base])
	}
	return files
}

// newUnit returns a unit with nothing set but systemd's defaults.
func newUnit(name, path string) *unit {
	return &unit{name: name, path: path, restart: "no", restartSec: defaultRestartSec, stopTimeout: defaultStopTimeout}
}

// loadUnit reads the unit and its drop-ins.
func loadUnit(searchPath []string, name string) (*unit, error) {
	path, err := findUnitFile(searchPath, name)
	if err != nil {
		return nil, err
	}
	u := newUnit(name, path)
	for _, f := range append([]string{path}, findDropIns(searchPath, name)...) {
		text, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read unit: %w", err)
		}
		if err := u.apply(string(text)); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if f != path {
			u.dropIns = append(u.dropIns, f)
		}
	}
	return u, nil
}

// apply sets what one unit file or drop-in says on top of what earlier ones
// said. Keys this stand-in has no use for (Wants=, After=, WantedBy=, ...)
// are ignored.
func (u *unit) apply(text string) error {
	section := ""
	for _, l := range logicalLines(text) {
		if strings.HasPrefix(l.text, "[") && strings.HasSuffix(l.text, "]") {
			section = l.text[1 : len(l.text)-1]
			continue
		}
		key, value, ok := strings.Cut(l.text, "=")
		if !ok {
			return fmt.Errorf("line %d: want KEY=VALUE, got %q", l.n, l.text)
		}
		key = strings.TrimSpace(key)
		if err := u.set(section, key, strings.TrimSpace(value)); err != nil {
			return fmt.Errorf("line %d: %s=: %w", l.n, key, err)
		}
	}
	return nil
}

// set applies one assignment. An empty value resets a list, as in systemd:
// that is how a drop-in replaces the unit's ExecStart.
func (u *unit) set(section, key, value string) error {
	var err error
	switch section + "." + key {
	case "Unit.Description":
		u.description = value
	case "Unit.ConditionPathExists":
		u.conditions = appendOrReset(u.conditions, value)
	case "Service.ExecStart":
		u.execStart = appendOrReset(u.execStart, value)
	case "Service.Environment":
		u.environment = appendOrReset(u.environment, value)
	case "Service.EnvironmentFile":
		u.envFiles = appendOrReset(u.envFiles, value)
	case "Service.Restart":
		if !slices.Contains([]string{"no", "always", "on-failure"}, value) {
			return fmt.Errorf("%q is not supported: want no, always or on-failure", value)
		}
		u.restart = value
	case "Service.RestartSec":
		u.restartSec, err = parseTimeSpan(value)
	case "Service.TimeoutStopSec":
		u.stopTimeout, err = parseTimeSpan(value)
	}
	return err
}

func appendOrReset(list []string, value string) []string {
	if value == "" {
		return nil
	}
	return append(list, value)
}

// line is one logical line of a unit file and the number it starts at.
type line struct {
	n    int
	text string
}

// logicalLines returns the file's lines with comments and blank lines left
// out and lines ending in a backslash joined to the next.
func logicalLines(text string) []line {
	var lines []line
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if strings.HasSuffix(l, `\`) {
			cur.WriteString(l[:len(l)-1] + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, line{start, cur.String()})
		cur.Reset()
	}
	if cur.Len() > 0 {
		lines = append(lines, line{start, strings.TrimSpace(cur.String())})
	}
	return lines
}

// parseTimeSpan reads systemd's time spans: "1", "1s", "100ms", "1min 30s",
// "infinity". A bare number is seconds.
func parseTimeSpan(s string) (time.Duration, error) {
	if s == "infinity" {
		return 100 * 365 * 24 * time.Hour, nil // long enough, and deadlines built on it do not overflow
	}
	units := map[string]time.Duration{
		"": time.Second, "s": time.Second, "sec": time.Second, "ms": time.Millisecond, "us": time.Microsecond,
		"m": time.Minute, "min": time.Minute, "h": time.Hour, "hr": time.Hour,
	}
	var total time.Duration
	rest := strings.TrimSpace(s)
	if rest == "" {
		return 0, fmt.Errorf("empty time span")
	}
	for rest != "" {
		i := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i < 0 {
			i = len(rest)
		}
		num, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("time span %q: %w", s, err)
		}
		rest = strings.TrimLeft(rest[i:], " ")
		j := strings.IndexFunc(rest, func(r rune) bool { return r < 'a' || r > 'z' })
		if j < 0 {
			j = len(rest)
		}
		unit, ok := units[rest[:j]]
		if !ok {
			return 0, fmt.Errorf("time span %q: unknown unit %q", s, rest[:j])
		}
		total += time.Duration(num * float64(unit))
		rest = strings.TrimLeft(rest[j:], " ")
	}
	return total, nil
}

// conditionsHold says whether every ConditionPathExists= holds, and if not
// which one failed.
func (u *unit) conditionsHold() (bool, string) {
	for _, c := range u.conditions {
		path, negated := strings.CutPrefix(c, "!")
		_, err := os.Stat(path)
		if (err == nil) == negated {
			return false, "ConditionPathExists=" + c
		}
	}
	return true, ""
}

// variables returns the unit's own variables. Those from EnvironmentFile=
// win over those from Environment=, whatever their order in the file, as in
// systemd; within each kind a later assignment wins.
func (u *unit) variables() (map[string]string, error) {
	vars := map[string]string{}
	for _, line := range u.environment {
		words, err := splitWords(line)
		if err != nil {
			return nil, fmt.Errorf("Environment=%s: %w", line, err)
		}
		for _, w := range words {
			if k, v, ok := strings.Cut(w, "="); ok && validName(k) {
				vars[k] = v
			}
		}
	}
	for _, f := range u.envFiles {
		path, optional := strings.CutPrefix(f, "-")
		text, err := os.ReadFile(path)
		if optional && errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("EnvironmentFile=%s: %w", f, err)
		}
		parseEnvFile(string(text), vars)
	}
	return vars, nil
}

// parseEnvFile adds a file's KEY=VALUE lines to vars. Values may be quoted;
// lines that are not assignments are skipped, as systemd skips them.
func parseEnvFile(text string, vars map[string]string) {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if k = strings.TrimSpace(k); ok && validName(k) {
			vars[k] = unquoteValue(strings.TrimSpace(v))
		}
	}
}

// unquoteValue takes the quotes off an environment file's value. Inside
// double quotes a backslash keeps the next character as is; single quotes
// keep everything. An unterminated quote runs to the end of the value.
func unquoteValue(v string) string {
	var b strings.Builder
	var quote rune
	escaped := false
	for _, r := range v {
		switch {
		case escaped:
			b.WriteRune(r)
			escaped = false
		case r == '\\' && quote != '\'':
			escaped = true
		case quote == 0 && (r == '"' || r == '\''):
			quote = r
		case r == quote:
			quote = 0
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// validName says whether s can be a variable name.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		letter := r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// splitWords splits a line into words at whitespace. Single quotes keep
// everything; in double quotes and outside quotes a backslash keeps the next
// character as is. Quotes may open anywhere in a word.
func splitWords(s string) ([]string, error) {
	var words []string
	var b strings.Builder
	inWord, escaped := false, false
	var quote rune
	for _, r := range s {
		switch {
		case escaped:
			b.WriteRune(r)
			escaped = false
		case quote == '\'' && r == '\'', quote == '"' && r == '"':
			quote = 0
		case quote == '\'':
			b.WriteRune(r)
		case r == '\\':
			escaped, inWord = true, true
		case quote == '"':
			b.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, b.String())
				b.Reset()
				inWord = false
			}
		default:
			b.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, fmt.Errorf("unterminated quote or escape in %q", s)
	}
	if inWord {
		words = append(words, b.String())
	}
	return words, nil
}

// expandWords replaces variables in a command's words as systemd does: a
// word that is exactly $NAME becomes the value's whitespace-separated words
// (none when it is empty or unset), ${NAME} is replaced inside its word, and
// $$ is a dollar sign. A $ followed by anything else stays as written.
func expandWords(words []string, lookup func(string) string) []string {
	var out []string
	for _, w := range words {
		if name, ok := strings.CutPrefix(w, "$"); ok && validName(name) {
			out = append(out, strings.Fields(lookup(name))...)
			continue
		}
		out = append(out, expandInWord(w, lookup))
	}
	return out
}

func expandInWord(w string, lookup func(string) string) string {
	var b strings.Builder
	for i := 0; i < len(w); i++ {
		if w[i] != '$' || i+1 == len(w) {
			b.WriteByte(w[i])
			continue
		}
		if w[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if end := strings.IndexByte(w[i:], '}'); w[i+1] == '{' && end > 0 && validName(w[i+2:i+end]) {
			b.WriteString(lookup(w[i+2 : i+end]))
			i += end
			continue
		}
		b.WriteByte('$')
	}
	return b.String()
}

// command is a service's process, ready to start.
type command struct {
	path          string
	args          []string // argv, argv[0] included
	env           []string
	ignoreFailure bool // the "-" prefix: a failing exit counts as success
}

// command builds the process to start: base is the environment the service
// inherits, which the unit's variables override; both are seen by the
// expansion of ExecStart.
func (u *unit) command(base []string) (*command, error) {
	if len(u.execStart) != 1 {
		return nil, fmt.Errorf("unit %s has %d ExecStart= commands, want exactly one", u.name, len(u.execStart))
	}
	vars, err := u.variables()
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	maps.Copy(env, vars)
	line := strings.TrimSpace(u.execStart[0])
	prefix := line[:len(line)-len(strings.TrimLeft(line, "-@+!:"))]
	words, err := splitWords(line[len(prefix):])
	if err != nil {
		return nil, fmt.Errorf("ExecStart=%s: %w", line, err)
	}
	words = expandWords(words, func(k string) string { return env[k] })
	c := &command{ignoreFailure: strings.Contains(prefix, "-")}
	if len(words) == 0 || !filepath.IsAbs(words[0]) {
		return nil, fmt.Errorf("ExecStart=%s: the command must start with an absolute path", line)
	}
	c.path, c.args = words[0], words
	if strings.Contains(prefix, "@") { // the second word is argv[0]
		if len(words) < 2 {
			return nil, fmt.Errorf("ExecStart=%s: @ needs a word for argv[0]", line)
		}
		c.args = words[1:]
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		c.env = append(c.env, k+"="+env[k])
	}
	return c, nil
}
