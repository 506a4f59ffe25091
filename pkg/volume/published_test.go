package volume

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/volume/atomic"
)

// A refresh whose payload is the one published touches nothing on disk; one whose
// version was replaced behind the agent's back, or whose payload changed, publishes
// again; the pod's record goes with its volumes.
func TestRefreshWithNothingNewSkipsTheWalk(t *testing.T) {
	f := newFixture(t, configMap("app", map[string]string{"a": "1"}))
	pod := basePod(withVolume("cfg", v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}))
	ctx := context.Background()
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := mounts["cfg"].HostPath
	data := filepath.Join(dir, "..data")
	version, err := os.Readlink(data)
	if err != nil {
		t.Fatal(err)
	}

	// The proof that the walk is skipped: a file changed by hand inside the version
	// directory is not looked at (the trade documented in published.go).
	if err := os.WriteFile(filepath.Join(dir, version, "a"), []byte("by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := readVol(t, mounts["cfg"], "a"); got != "by hand" {
		t.Fatalf("a = %q: the refresh with nothing new rewrote the volume", got)
	}

	// ..data gone: published again, the file as the configMap has it.
	if err := os.Remove(data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := readVol(t, mounts["cfg"], "a"); got != "1" {
		t.Fatalf("a = %q after ..data was removed, want 1", got)
	}

	// ..data pointing at another version: published again.
	if err := os.WriteFile(filepath.Join(dir, mustReadlink(t, data), "a"), []byte("by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(data); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(other), data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := readVol(t, mounts["cfg"], "a"); got != "1" {
		t.Fatalf("a = %q after ..data was pointed elsewhere, want 1", got)
	}

	// A new payload: published.
	if _, err := f.client.CoreV1().ConfigMaps("ns").Update(ctx, configMap("app", map[string]string{"a": "2"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := readVol(t, mounts["cfg"], "a"); got != "2" {
		t.Fatalf("a = %q after the configMap changed, want 2", got)
	}

	if len(f.mgr.published.pods[pod.UID]) != 1 {
		t.Fatalf("published record of the pod = %v, want its one volume", f.mgr.published.pods[pod.UID])
	}
	if err := f.mgr.UnmountPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.mgr.published.pods[pod.UID]; ok {
		t.Fatal("the pod's published record outlived its volumes")
	}
}

// The digest sees every part of a payload: a path, a mode, the data, the owning group.
func TestPayloadDigestSeesEveryPart(t *testing.T) {
	base := func() map[string]atomic.FileProjection {
		return map[string]atomic.FileProjection{"a": {Data: []byte("1"), Mode: 0o644}}
	}
	gid := int64(2000)
	d0 := payloadDigest(base(), nil)
	if payloadDigest(base(), nil) != d0 {
		t.Fatal("the same payload hashed twice differs")
	}
	for name, d := range map[string][32]byte{
		"path":        payloadDigest(map[string]atomic.FileProjection{"b": {Data: []byte("1"), Mode: 0o644}}, nil),
		"mode":        payloadDigest(map[string]atomic.FileProjection{"a": {Data: []byte("1"), Mode: 0o600}}, nil),
		"data":        payloadDigest(map[string]atomic.FileProjection{"a": {Data: []byte("2"), Mode: 0o644}}, nil),
		"fsGroup":     payloadDigest(base(), &gid),
		"a file more": payloadDigest(map[string]atomic.FileProjection{"a": {Data: []byte("1"), Mode: 0o644}, "b": {}}, nil),
		// Lengths are hashed: the boundary between path and data cannot move.
		"boundary": payloadDigest(map[string]atomic.FileProjection{"a1": {Data: nil, Mode: 0o644}}, nil),
	} {
		if d == d0 {
			t.Errorf("a payload differing in its %s hashes the same", name)
		}
	}
}

func mustReadlink(t *testing.T, p string) string {
	t.Helper()
	s, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
