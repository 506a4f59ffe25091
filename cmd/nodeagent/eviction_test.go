package main

import (
	"context"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodeagent/nodeagent/pkg/eviction"
	"github.com/nodeagent/nodeagent/pkg/poddir"
)

func TestDiskLayoutOnOneFilesystem(t *testing.T) {
	root, images := t.TempDir(), t.TempDir()
	info := &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: images}}}}
	d := diskLayout{rootDir: root, imageFsInfo: func(context.Context) (*runtimeapi.ImageFsInfoResponse, error) { return info, nil }}
	got, err := d.Layout(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != (eviction.DiskLayout{}) {
		t.Errorf("layout = %+v, want one filesystem", got)
	}
	info.ImageFilesystems = nil
	if _, err := d.Layout(context.Background()); err == nil {
		t.Error("no image filesystem: no error")
	}
}

func TestEvictionSettingsFromTheConfiguration(t *testing.T) {
	kc := &kubeletv1beta1.KubeletConfiguration{
		EvictionHard:            map[string]string{"memory.available": "200Mi"},
		EvictionSoft:            map[string]string{"nodefs.available": "20%"},
		EvictionSoftGracePeriod: map[string]string{"nodefs.available": "1m"},
		EnforceNodeAllocatable:  []string{"pods"},
	}
	ts, err := eviction.ParseThresholds(evictionSettings(kc))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, th := range ts {
		got = append(got, th.String())
	}
	want := []string{"memory.available<200Mi", "nodefs.available<20% for 1m0s", "allocatableMemory.available<200Mi"}
	if len(got) != len(want) {
		t.Fatalf("thresholds = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("thresholds = %q, want %q", got, want)
		}
	}
	full := &kubeletv1beta1.KubeletConfiguration{}
	setDefaults(full)
	applyEvictionDefaults(full)
	full.EvictionSoft = kc.EvictionSoft
	if err := validateKubeletConfig(full); err == nil {
		t.Error("a soft threshold without a grace period validated")
	}
	full.EvictionSoftGracePeriod = kc.EvictionSoftGracePeriod
	if err := validateKubeletConfig(full); err != nil {
		t.Errorf("with its grace period: %v", err)
	}
}

// endedPods says every pod has stopped.
type endedPods struct{ eviction.Pods }

func (endedPods) PodEnded(types.UID) bool { return true }

func TestAnEvictedPodEndsOnceItsDirectoryIsGone(t *testing.T) {
	layout := poddir.New(t.TempDir())
	const uid = types.UID("0e2e1a4c-3f5d-4c8e-9f1a-2b3c4d5e6f70")
	dir := layout.Pod(uid).VolumeDir("kubernetes.io/empty-dir", "scratch")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := reclaimedPods{Pods: endedPods{}, layout: layout}
	if p.PodEnded(uid) {
		t.Error("ended while its emptyDir is still on disk")
	}
	if err := os.RemoveAll(layout.Pod(uid).Dir()); err != nil {
		t.Fatal(err)
	}
	if !p.PodEnded(uid) {
		t.Error("not ended once its containers stopped and its directory went")
	}
}
