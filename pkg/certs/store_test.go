package certs

import (
	"bytes"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// TestPairStoreUpdate checks the kubelet's layout: one mode 0600 file per
// pair, named after its time, the certificate before the key, and the
// current symlink at the newest, by absolute path, with nothing else
// left behind; a new store finds the newest.
func TestPairStoreUpdate(t *testing.T) {
	ca := newTestCA(t)
	dir := filepath.Join(t.TempDir(), "pki")
	s := newPairStore(dir, clientPrefix, "", "")
	t1 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.Local)
	t2 := t1.Add(time.Hour)

	cert1, key1 := ca.issue(t, "a", time.Hour)
	if _, err := s.update(cert1, key1, t1); err != nil {
		t.Fatal(err)
	}
	cert2, key2 := ca.issue(t, "b", time.Hour)
	got, err := s.update(cert2, key2, t2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Leaf.SerialNumber.String() != serialOf(t, cert2) {
		t.Errorf("update returned serial %s, want %s", got.Leaf.SerialNumber, serialOf(t, cert2))
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"kubelet-client-2026-03-04-05-06-07.pem", "kubelet-client-2026-03-04-06-06-07.pem", "kubelet-client-current.pem"}
	if !slices.Equal(names, want) {
		t.Fatalf("cert dir holds %v, want %v", names, want)
	}
	newest := filepath.Join(dir, want[1])
	if target, err := os.Readlink(s.currentPath()); err != nil || target != newest {
		t.Errorf("current.pem -> %q (%v), want %q", target, err, newest)
	}
	st, err := os.Stat(newest)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("pair file mode %v, %v; want 0600", st.Mode(), err)
	}
	data, _ := os.ReadFile(newest)
	var kinds []string
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		kinds = append(kinds, block.Type)
	}
	if !slices.Equal(kinds, []string{"CERTIFICATE", "EC PRIVATE KEY"}) {
		t.Errorf("pair file holds %v, want the certificate, then the key", kinds)
	}
	if !bytes.Contains(data, bytes.TrimSpace(key2)) {
		t.Error("pair file does not hold the key as given")
	}

	loaded := newPairStore(dir, clientPrefix, "", "").load(klog.Background())
	if loaded == nil || loaded.Leaf.SerialNumber.String() != serialOf(t, cert2) {
		t.Errorf("a new store loads %v, want serial %s", loaded, serialOf(t, cert2))
	}
}

func TestPairStoreUpdateRefusesBadInput(t *testing.T) {
	ca := newTestCA(t)
	cert, key := ca.issue(t, "a", time.Hour)
	_, otherKey := ca.issue(t, "b", time.Hour)
	for _, tt := range []struct {
		name      string
		cert, key []byte
	}{
		{name: "no certificate", cert: []byte("junk"), key: key},
		{name: "no key", cert: cert, key: []byte("junk")},
		{name: "key of another certificate", cert: cert, key: otherKey},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newPairStore(dir, clientPrefix, "", "")
			if _, err := s.update(tt.cert, tt.key, time.Now()); err == nil {
				t.Fatal("update succeeded")
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("left %d files behind", len(entries))
			}
		})
	}
}

// TestPairStoreLoad: the current pair first, else the kubeconfig's
// files, else none; what does not load counts as missing.
func TestPairStoreLoad(t *testing.T) {
	ca := newTestCA(t)
	type fixture struct {
		dir, certFile, keyFile string
		current, files         string // serials
	}
	// base: a current pair and a pair of files the kubeconfig names.
	base := func(t *testing.T) *fixture {
		f := &fixture{dir: t.TempDir()}
		cert, key := ca.issue(t, "current", time.Hour)
		if _, err := newPairStore(f.dir, clientPrefix, "", "").update(cert, key, time.Now()); err != nil {
			t.Fatal(err)
		}
		f.current = serialOf(t, cert)
		cert, key = ca.issue(t, "files", time.Hour)
		f.certFile, f.keyFile = filepath.Join(f.dir, "kubeconfig.crt"), filepath.Join(f.dir, "kubeconfig.key")
		os.WriteFile(f.certFile, cert, 0o600)
		os.WriteFile(f.keyFile, key, 0o600)
		f.files = serialOf(t, cert)
		return f
	}
	currentPath := func(f *fixture) string { return filepath.Join(f.dir, "kubelet-client-current.pem") }
	removeTarget := func(t *testing.T, f *fixture) {
		target, err := os.Readlink(currentPath(f))
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(target)
	}
	noFiles := func(t *testing.T, f *fixture) { f.certFile, f.keyFile = "", "" }
	tests := []struct {
		name   string
		mutate []func(t *testing.T, f *fixture)
		want   func(f *fixture) string // "" for none
	}{
		{name: "current pair first", want: func(f *fixture) string { return f.current }},
		{name: "no current pair: the kubeconfig's files", mutate: []func(*testing.T, *fixture){
			func(t *testing.T, f *fixture) { os.Remove(currentPath(f)) },
		}, want: func(f *fixture) string { return f.files }},
		{name: "nothing", mutate: []func(*testing.T, *fixture){
			func(t *testing.T, f *fixture) { os.Remove(currentPath(f)) }, noFiles,
		}, want: func(*fixture) string { return "" }},
		{name: "dangling symlink: the kubeconfig's files", mutate: []func(*testing.T, *fixture){removeTarget},
			want: func(f *fixture) string { return f.files }},
		{name: "dangling symlink, no files", mutate: []func(*testing.T, *fixture){removeTarget, noFiles},
			want: func(*fixture) string { return "" }},
		{name: "unreadable current pair: the kubeconfig's files", mutate: []func(*testing.T, *fixture){
			func(t *testing.T, f *fixture) {
				os.Remove(currentPath(f))
				os.WriteFile(currentPath(f), []byte("junk"), 0o600)
			},
		}, want: func(f *fixture) string { return f.files }},
		{name: "unreadable files", mutate: []func(*testing.T, *fixture){
			func(t *testing.T, f *fixture) {
				os.Remove(currentPath(f))
				os.WriteFile(f.keyFile, []byte("junk"), 0o600)
			},
		}, want: func(*fixture) string { return "" }},
		{name: "interrupted swap: the new symlink is taken", mutate: []func(*testing.T, *fixture){
			func(t *testing.T, f *fixture) {
				os.Rename(currentPath(f), filepath.Join(f.dir, "kubelet-client-updated.pem"))
			},
		}, want: func(f *fixture) string { return f.current }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := base(t)
			for _, m := range tt.mutate {
				m(t, f)
			}
			got := newPairStore(f.dir, clientPrefix, f.certFile, f.keyFile).load(klog.Background())
			want := tt.want(f)
			switch {
			case want == "" && got != nil:
				t.Errorf("loaded serial %s, want none", got.Leaf.SerialNumber)
			case want != "" && got == nil:
				t.Errorf("loaded none, want serial %s", want)
			case want != "" && got.Leaf.SerialNumber.String() != want:
				t.Errorf("loaded serial %s, want %s", got.Leaf.SerialNumber, want)
			}
		})
	}
}

// TestPairStoreReplacesADanglingSymlink: an update after the pair a
// symlink named was removed points it at the new pair.
func TestPairStoreReplacesADanglingSymlink(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	s := newPairStore(dir, servingPrefix, "", "")
	if err := os.Symlink(filepath.Join(dir, "gone.pem"), s.currentPath()); err != nil {
		t.Fatal(err)
	}
	if got := s.load(klog.Background()); got != nil {
		t.Fatal("a dangling symlink loaded")
	}
	cert, key := ca.issue(t, "a", time.Hour)
	if _, err := s.update(cert, key, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := s.load(klog.Background()); got == nil || got.Leaf.SerialNumber.String() != serialOf(t, cert) {
		t.Errorf("after update loaded %v, want serial %s", got, serialOf(t, cert))
	}
}
