package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/eviction"
	"github.com/nodeagent/nodeagent/pkg/poddir"
)

// evictionSettings are the configuration's eviction fields, as the
// eviction manager parses them.
func evictionSettings(kc *kubeletv1beta1.KubeletConfiguration) eviction.Settings {
	return eviction.Settings{
		Hard: kc.EvictionHard, Soft: kc.EvictionSoft,
		SoftGracePeriod: kc.EvictionSoftGracePeriod, MinimumReclaim: kc.EvictionMinimumReclaim,
		EnforcePodsAllocatable: slices.Contains(kc.EnforceNodeAllocatable, enforcePods),
	}
}

// evictionDeps are what the eviction manager acts through, built before
// it in run.
type evictionDeps struct {
	stats       eviction.Stats
	pods        eviction.Pods
	images      eviction.ImageGC
	containers  eviction.ContainerGC
	imageFsInfo func(context.Context) (*runtimeapi.ImageFsInfoResponse, error)
	recorder    eviction.Recorder
	pressure    *eviction.Pressure
	metrics     eviction.Metrics
}

// newEvictionManager builds the eviction manager from the configuration
// (validated: the thresholds parse).
func newEvictionManager(cfg *agentConfig, deps evictionDeps) (*eviction.Manager, error) {
	kc := cfg.kubelet
	thresholds, err := eviction.ParseThresholds(evictionSettings(kc))
	if err != nil {
		return nil, err
	}
	return eviction.New(eviction.Config{
		Thresholds:                    thresholds,
		PressureTransitionPeriod:      kc.EvictionPressureTransitionPeriod.Duration,
		MaxPodGracePeriodSeconds:      int64(kc.EvictionMaxPodGracePeriod),
		LocalStorageCapacityIsolation: kc.LocalStorageCapacityIsolation != nil && *kc.LocalStorageCapacityIsolation,
		Stats:                         deps.stats,
		Pods:                          reclaimedPods{Pods: deps.pods, layout: poddir.New(cfg.rootDir)},
		ImageGC:                       deps.images,
		ContainerGC:                   deps.containers,
		Disks:                         diskLayout{rootDir: cfg.rootDir, imageFsInfo: deps.imageFsInfo},
		Recorder:                      deps.recorder,
		Node:                          &v1.ObjectReference{Kind: "Node", Name: cfg.nodeName, UID: types.UID(cfg.nodeName)},
		Pressure:                      deps.pressure,
		Metrics:                       deps.metrics,
		Clock:                         clock.RealClock{},
	})
}

// reclaimedPods holds an evicted pod as ended once its containers have
// stopped and its volumes are gone with its directory, as the kubelet
// waits for an evicted pod's resources to be reclaimed before it looks
// again: until then an emptyDir's data still fills the disk, and the next
// look would evict another pod for it.
type reclaimedPods struct {
	eviction.Pods
	layout poddir.Layout
}

func (p reclaimedPods) PodEnded(uid types.UID) bool {
	if !p.Pods.PodEnded(uid) {
		return false
	}
	_, err := os.Lstat(p.layout.Pod(uid).Dir())
	return errors.Is(err, fs.ErrNotExist)
}

// diskLayout finds where the runtime keeps images and writable layers,
// as the kubelet does (cAdvisor compares the devices): the image
// filesystem is dedicated when its mount point is on another device than
// the root directory, the container filesystem split when it is on
// another device than the images.
type diskLayout struct {
	rootDir     string
	imageFsInfo func(context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

func (d diskLayout) Layout(ctx context.Context) (eviction.DiskLayout, error) {
	resp, err := d.imageFsInfo(ctx)
	if err != nil {
		return eviction.DiskLayout{}, fmt.Errorf("image filesystem info: %w", err)
	}
	images := resp.GetImageFilesystems()
	if len(images) == 0 || images[0].GetFsId().GetMountpoint() == "" {
		return eviction.DiskLayout{}, errors.New("the runtime reports no image filesystem")
	}
	root, err := device(d.rootDir)
	if err != nil {
		return eviction.DiskLayout{}, err
	}
	image, err := device(images[0].GetFsId().GetMountpoint())
	if err != nil {
		return eviction.DiskLayout{}, err
	}
	layout := eviction.DiskLayout{DedicatedImageFs: image != root}
	if cs := resp.GetContainerFilesystems(); len(cs) > 0 && cs[0].GetFsId().GetMountpoint() != "" {
		container, err := device(cs[0].GetFsId().GetMountpoint())
		if err != nil {
			return eviction.DiskLayout{}, err
		}
		layout.SplitContainerFs = container != image
	}
	return layout, nil
}

func device(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return uint64(st.Dev), nil
}
