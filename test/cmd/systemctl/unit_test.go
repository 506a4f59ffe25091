package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// parseUnit applies the texts in order, as a unit file and its drop-ins.
func parseUnit(t *testing.T, texts ...string) *unit {
	t.Helper()
	u := newUnit("test.service", "/test.service")
	for _, text := range texts {
		if err := u.apply(text); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

func TestDropInsReplaceExecStartInFileNameOrder(t *testing.T) {
	etc, lib := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(lib, "foo.service"), "[Service]\nExecStart=/bin/original\nRestart=always\n")
	writeFile(t, filepath.Join(lib, "foo.service.d", "10-reset.conf"), "[Service]\nExecStart=\nExecStart=/bin/lib-10\n")
	writeFile(t, filepath.Join(etc, "foo.service.d", "10-reset.conf"), "[Service]\nExecStart=\nExecStart=/bin/etc-10\n")
	writeFile(t, filepath.Join(lib, "foo.service.d", "20-env.conf"), "[Service]\nEnvironment=A=1\n")
	writeFile(t, filepath.Join(etc, "foo.service.d", "05-first.conf"), "[Service]\nRestart=no\nRestartSec=3\n")
	writeFile(t, filepath.Join(etc, "foo.service.d", "notes.txt"), "[Service]\nExecStart=/bin/not-a-drop-in\n")

	u, err := loadUnit([]string{etc, lib}, "foo.service")
	if err != nil {
		t.Fatal(err)
	}
	if u.path != filepath.Join(lib, "foo.service") {
		t.Errorf("path = %s", u.path)
	}
	if !slices.Equal(u.execStart, []string{"/bin/etc-10"}) {
		t.Errorf("execStart = %q: /etc's 10-reset.conf hides lib's and resets the unit's", u.execStart)
	}
	wantDropIns := []string{
		filepath.Join(etc, "foo.service.d", "05-first.conf"),
		filepath.Join(etc, "foo.service.d", "10-reset.conf"),
		filepath.Join(lib, "foo.service.d", "20-env.conf"),
	}
	if !slices.Equal(u.dropIns, wantDropIns) {
		t.Errorf("dropIns = %q, want %q", u.dropIns, wantDropIns)
	}
	if u.restart != "no" || u.restartSec != 3*time.Second || !slices.Equal(u.environment, []string{"A=1"}) {
		t.Errorf("restart %q restartSec %v environment %q", u.restart, u.restartSec, u.environment)
	}
}

func TestMissingUnit(t *testing.T) {
	if _, err := loadUnit([]string{t.TempDir()}, "nope.service"); !errors.Is(err, errNoUnit) {
		t.Errorf("err = %v, want errNoUnit", err)
	}
}

func TestUnitFileSyntax(t *testing.T) {
	u := parseUnit(t, `# a comment
; another
[Unit]
Description = A test unit
ConditionPathExists=/a
ConditionPathExists=!/b

[Service]
ExecStart=/bin/echo one \
  two \
  three
Restart=on-failure
TimeoutStopSec=1min 30s

[Install]
WantedBy=multi-user.target
`)
	if u.description != "A test unit" {
		t.Errorf("description = %q", u.description)
	}
	if !slices.Equal(u.conditions, []string{"/a", "!/b"}) {
		t.Errorf("conditions = %q", u.conditions)
	}
	if len(u.execStart) != 1 || strings.Join(strings.Fields(u.execStart[0]), " ") != "/bin/echo one two three" {
		t.Errorf("execStart = %q", u.execStart)
	}
	if u.restart != "on-failure" || u.stopTimeout != 90*time.Second || u.restartSec != defaultRestartSec {
		t.Errorf("restart %q stopTimeout %v restartSec %v", u.restart, u.stopTimeout, u.restartSec)
	}
}

func TestUnitFileErrors(t *testing.T) {
	for _, text := range []string{
		"[Service]\nRestart=sometimes\n",
		"[Service]\nRestartSec=soon\n",
		"[Service]\nnot an assignment\n",
	} {
		if err := newUnit("x.service", "/x").apply(text); err == nil {
			t.Errorf("no error for %q", text)
		}
	}
}

func TestConditionPathExists(t *testing.T) {
	there := writeFile(t, filepath.Join(t.TempDir(), "there"), "")
	missing := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name       string
		conditions []string
		want       bool
	}{
		{"none", nil, true},
		{"present", []string{there}, true},
		{"missing", []string{missing}, false},
		{"negated missing", []string{"!" + missing}, true},
		{"negated present", []string{"!" + there}, false},
		{"all must hold", []string{there, missing}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUnit("x.service", "/x")
			u.conditions = tt.conditions
			if got, failed := u.conditionsHold(); got != tt.want {
				t.Errorf("conditionsHold = %v (%s), want %v", got, failed, tt.want)
			}
		})
	}
}

func TestEnvironment(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "env"), `# comment
; comment

PLAIN=one two
DQ="double \"quoted\" value"
SQ='single $quoted'
export EXPORTED=yes
SPACED = around
FROM_FILE=file
not an assignment
`)
	later := writeFile(t, filepath.Join(dir, "later"), "FROM_FILE=later\n")
	tests := []struct {
		name  string
		texts []string
		want  map[string]string
		err   bool
	}{
		{
			name:  "quoted assignments",
			texts: []string{`[Service]` + "\n" + `Environment="A=b c" D=e 'F=g h'`},
			want:  map[string]string{"A": "b c", "D": "e", "F": "g h"},
		},
		{
			name:  "later assignment wins",
			texts: []string{"[Service]\nEnvironment=A=1 A=2\n", "[Service]\nEnvironment=A=3\n"},
			want:  map[string]string{"A": "3"},
		},
		{
			name:  "empty assignment resets",
			texts: []string{"[Service]\nEnvironment=A=1\nEnvironment=\nEnvironment=B=2\n"},
			want:  map[string]string{"B": "2"},
		},
		{
			name:  "file values",
			texts: []string{"[Service]\nEnvironmentFile=" + file + "\n"},
			want: map[string]string{"PLAIN": "one two", "DQ": `double "quoted" value`, "SQ": "single $quoted",
				"EXPORTED": "yes", "SPACED": "around", "FROM_FILE": "file"},
		},
		{
			name:  "file wins over Environment= written after it",
			texts: []string{"[Service]\nEnvironmentFile=" + later + "\nEnvironment=FROM_FILE=env OTHER=env\n"},
			want:  map[string]string{"FROM_FILE": "later", "OTHER": "env"},
		},
		{
			name:  "later file wins",
			texts: []string{"[Service]\nEnvironmentFile=" + file + "\n", "[Service]\nEnvironmentFile=" + later + "\n"},
			want: map[string]string{"PLAIN": "one two", "DQ": `double "quoted" value`, "SQ": "single $quoted",
				"EXPORTED": "yes", "SPACED": "around", "FROM_FILE": "later"},
		},
		{
			name:  "optional file missing",
			texts: []string{"[Service]\nEnvironment=A=1\nEnvironmentFile=-" + filepath.Join(dir, "absent") + "\n"},
			want:  map[string]string{"A": "1"},
		},
		{
			name:  "required file missing",
			texts: []string{"[Service]\nEnvironmentFile=" + filepath.Join(dir, "absent") + "\n"},
			err:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseUnit(t, tt.texts...).variables()
			if tt.err {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestExpandCommand(t *testing.T) {
	vars := map[string]string{"ARGS": "--a=1  --b=2", "ONE": "x y", "EMPTY": ""}
	lookup := func(k string) string { return vars[k] }
	tests := []struct {
		line string
		want []string
	}{
		{"/bin/x $ARGS", []string{"/bin/x", "--a=1", "--b=2"}},
		{"/bin/x ${ONE}", []string{"/bin/x", "x y"}},
		{"/bin/x --flag=${ONE}!", []string{"/bin/x", "--flag=x y!"}},
		{"/bin/x $UNSET $EMPTY last", []string{"/bin/x", "last"}},
		{"/bin/x ${UNSET}", []string{"/bin/x", ""}},
		{`/bin/x "a b" 'c d' e\ f`, []string{"/bin/x", "a b", "c d", "e f"}},
		{`/bin/sh -c 'echo "$$HOME" $$1'`, []string{"/bin/sh", "-c", `echo "$HOME" $1`}},
		{"/bin/x --y=$ONE $ cost$", []string{"/bin/x", "--y=$ONE", "$", "cost$"}},
		{`/bin/x "$ARGS"`, []string{"/bin/x", "--a=1", "--b=2"}}, // quotes go before expansion, as in systemd
		{`/bin/x ""`, []string{"/bin/x", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			words, err := splitWords(tt.line)
			if err != nil {
				t.Fatal(err)
			}
			if got := expandWords(words, lookup); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := splitWords(`/bin/x "open`); err == nil {
		t.Error("no error for an unterminated quote")
	}
}

func TestCommand(t *testing.T) {
	base := []string{"PATH=/usr/bin", "A=base"}
	tests := []struct {
		name     string
		text     string
		wantPath string
		wantArgs []string
		ignore   bool
		err      bool
	}{
		{name: "plain", text: "ExecStart=/bin/x $A", wantPath: "/bin/x", wantArgs: []string{"/bin/x", "unit"}},
		{name: "ignore failure", text: "ExecStart=-/bin/x", wantPath: "/bin/x", wantArgs: []string{"/bin/x"}, ignore: true},
		{name: "argv0", text: "ExecStart=@/bin/x name arg", wantPath: "/bin/x", wantArgs: []string{"name", "arg"}},
		{name: "privileged prefixes ignored", text: "ExecStart=+/bin/x\n", wantPath: "/bin/x", wantArgs: []string{"/bin/x"}},
		{name: "relative path", text: "ExecStart=x", err: true},
		{name: "two commands", text: "ExecStart=/bin/x\nExecStart=/bin/y", err: true},
		{name: "none", text: "ExecStart=/bin/x\nExecStart=", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseUnit(t, "[Service]\nEnvironment=A=unit\n"+tt.text+"\n").command(base)
			if tt.err {
				if err == nil {
					t.Fatalf("no error, got %+v", c)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.path != tt.wantPath || !slices.Equal(c.args, tt.wantArgs) || c.ignoreFailure != tt.ignore {
				t.Errorf("got %s %q ignore %v", c.path, c.args, c.ignoreFailure)
			}
			if !slices.Equal(c.env, []string{"A=unit", "PATH=/usr/bin"}) {
				t.Errorf("env = %q: the unit's variables override the inherited ones", c.env)
			}
		})
	}
}

// The files operators install must give kubeadm's command line.
func TestKubeletManifests(t *testing.T) {
	u, err := loadUnit([]string{"../../../manifests"}, unitName("kubelet"))
	if err != nil {
		t.Fatal(err)
	}
	if u.restart != "always" || u.restartSec != time.Second || len(u.dropIns) != 1 {
		t.Errorf("restart %q restartSec %v dropIns %q", u.restart, u.restartSec, u.dropIns)
	}
	wantFiles := []string{"-/var/lib/kubelet/kubeadm-flags.env", "-/etc/default/kubelet"}
	if !slices.Equal(u.envFiles, wantFiles) {
		t.Fatalf("envFiles = %q, want %q", u.envFiles, wantFiles)
	}
	// The machine's own files must not decide the test: stand in for them.
	dir := t.TempDir()
	u.envFiles = []string{
		"-" + writeFile(t, filepath.Join(dir, "kubeadm-flags.env"),
			`KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-ip=10.0.0.2"`+"\n"),
		"-" + filepath.Join(dir, "default-kubelet"),
	}
	c, err := u.command(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/usr/local/bin/nodeagent",
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml",
		"--container-runtime-endpoint=unix:///run/containerd/containerd.sock", "--node-ip=10.0.0.2"}
	if c.path != want[0] || !slices.Equal(c.args, want) {
		t.Errorf("command = %s %q, want %q", c.path, c.args, want)
	}
}

func TestParseTimeSpan(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{in: "1", want: time.Second},
		{in: "1s", want: time.Second},
		{in: "100ms", want: 100 * time.Millisecond},
		{in: "2min", want: 2 * time.Minute},
		{in: "1min 30s", want: 90 * time.Second},
		{in: "1.5s", want: 1500 * time.Millisecond},
		{in: "0", want: 0},
		{in: "", err: true},
		{in: "5 fortnights", err: true},
		{in: "s", err: true},
	}
	for _, tt := range tests {
		got, err := parseTimeSpan(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("parseTimeSpan(%q) = %v, %v", tt.in, got, err)
		}
	}
}

func TestShouldRestart(t *testing.T) {
	failed := os.ErrProcessDone // any error stands for a failed run
	tests := []struct {
		policy string
		result error
		want   bool
	}{
		{"no", nil, false},
		{"no", failed, false},
		{"always", nil, true},
		{"always", failed, true},
		{"on-failure", nil, false},
		{"on-failure", failed, true},
	}
	for _, tt := range tests {
		if got := shouldRestart(tt.policy, tt.result); got != tt.want {
			t.Errorf("shouldRestart(%q, %v) = %v", tt.policy, tt.result, got)
		}
	}
}

func TestUnitName(t *testing.T) {
	for in, want := range map[string]string{
		"kubelet":           "kubelet.service",
		"kubelet.service":   "kubelet.service",
		"multi-user.target": "multi-user.target",
		"getty@tty1":        "getty@tty1.service",
		"a.b":               "a.b.service",
	} {
		if got := unitName(in); got != want {
			t.Errorf("unitName(%q) = %q, want %q", in, got, want)
		}
	}
}
