package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/poddir"
)

// UnmountPod tears down every volume of the pod and removes its directory.
// Call it only once no container of the pod runs. It works from the disk
// alone, so it also cleans pods found by Reconstruct. A pod with no
// directory is success. Symlinks are removed, never followed, and nothing
// is removed while a mount remains below the pod directory.
func (m *Manager) UnmountPod(ctx context.Context, uid types.UID) error {
	if !poddir.ValidUID(uid) {
		return fmt.Errorf("invalid pod UID %q", uid)
	}
	log := klog.FromContext(ctx).WithValues("podUID", uid)
	unlock := m.lockPod(uid)
	defer unlock()

	pd := m.layout.Pod(uid)
	fi, err := os.Lstat(pd.Dir())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		m.forget(uid)
		return nil
	case err != nil:
		return fmt.Errorf("unmount pod %s: %w", uid, err)
	case fi.IsDir():
		// Subpath binds first: they pin the volumes below them.
		if err := removeDir(m.mounter, pd.SubPathsDir()); err != nil {
			return fmt.Errorf("unmount pod %s: %w", uid, err)
		}
		vols, err := m.volumesOnDisk(uid)
		if err != nil {
			return fmt.Errorf("unmount pod %s: %w", uid, err)
		}
		var errs []error
		for _, v := range vols {
			if err := m.tearDownVolume(ctx, v); err != nil {
				errs = append(errs, fmt.Errorf("volume %q (%s): %w", v.name, v.pluginName, err))
				continue
			}
			log.V(5).Info("Volume torn down", "volume", v.name, "plugin", v.pluginName)
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("unmount pod %s: %w", uid, err)
		}
	}
	if err := removeDir(m.mounter, pd.Dir()); err != nil {
		return fmt.Errorf("unmount pod %s: %w", uid, err)
	}
	m.forget(uid)
	log.V(4).Info("Pod volumes torn down")
	return nil
}

func (m *Manager) tearDownVolume(ctx context.Context, v volumeOnDisk) error {
	if p := m.pluginByName(v.pluginName); p != nil {
		return p.tearDown(ctx, v.dir)
	}
	// A plugin this build does not know (a newer agent's): the generic
	// teardown is still safe.
	return removeDir(m.mounter, v.dir)
}

func (m *Manager) forget(uid types.UID) {
	m.tokens.forget(uid)
	m.certs.forget(uid)
	m.published.forget(uid)
}

// volumeOnDisk is one pods/<uid>/volumes/<plugin>/<name> directory.
type volumeOnDisk struct {
	pluginName string
	name       string
	dir        string
}

// volumesOnDisk lists the pod's volume directories. Only real directories
// are descended into; a symlink in their place is left for removeDir,
// which deletes the link itself.
func (m *Manager) volumesOnDisk(uid types.UID) ([]volumeOnDisk, error) {
	volsDir := m.layout.Pod(uid).VolumesDir()
	plugins, err := os.ReadDir(volsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []volumeOnDisk
	for _, pe := range plugins {
		if !pe.IsDir() {
			continue
		}
		names, err := os.ReadDir(filepath.Join(volsDir, pe.Name()))
		if err != nil {
			return nil, err
		}
		for _, ve := range names {
			if !ve.IsDir() {
				continue
			}
			out = append(out, volumeOnDisk{
				pluginName: poddir.UnescapePluginName(pe.Name()),
				name:       ve.Name(),
				dir:        filepath.Join(volsDir, pe.Name(), ve.Name()),
			})
		}
	}
	return out, nil
}

// ReconstructedPod is a pod found on disk after a restart.
type ReconstructedPod struct {
	UID types.UID
	// Volumes maps each volume found to its plugin's name.
	Volumes map[string]string
	// MountPoints are the mount points below the pod directory.
	MountPoints []string
}

// HasPod says whether the pod has a directory under the root dir; a
// stat, as admission asks it of each pod new to this run.
func (m *Manager) HasPod(uid types.UID) bool {
	if !poddir.ValidUID(uid) {
		return false
	}
	st, err := os.Stat(m.layout.Pod(uid).Dir())
	return err == nil && st.IsDir()
}

// PodUIDs lists the pods that have a directory under the root dir: what
// the agent must clean up even when the apiserver no longer has them. It
// reads one directory and no mount table.
func (m *Manager) PodUIDs() ([]types.UID, error) {
	entries, err := os.ReadDir(m.layout.PodsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list pod directories: %w", err)
	}
	var uids []types.UID
	for _, e := range entries {
		if uid := types.UID(e.Name()); e.IsDir() && poddir.ValidUID(uid) {
			uids = append(uids, uid)
		}
	}
	return uids, nil
}

// Reconstruct lists the pods whose directories are on disk, with their
// volumes and mount points, after an agent restart. It changes nothing:
// a pod still wanted is picked up by its next MountPod, which finds its
// mounts in place; a pod no longer wanted is passed to UnmountPod.
func (m *Manager) Reconstruct(ctx context.Context) ([]ReconstructedPod, error) {
	log := klog.FromContext(ctx)
	entries, err := os.ReadDir(m.layout.PodsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reconstruct volumes: %w", err)
	}
	mps, err := m.mounter.mountPoints(m.layout.PodsDir())
	if err != nil {
		return nil, fmt.Errorf("reconstruct volumes: %w", err)
	}
	var pods []ReconstructedPod
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.IsDir() || !poddir.ValidUID(uid) {
			continue
		}
		vols, err := m.volumesOnDisk(uid)
		if err != nil {
			return nil, fmt.Errorf("reconstruct volumes of pod %s: %w", uid, err)
		}
		rp := ReconstructedPod{UID: uid, Volumes: map[string]string{}}
		for _, v := range vols {
			rp.Volumes[v.name] = v.pluginName
		}
		for _, mp := range mountsUnder(mps, m.layout.Pod(uid).Dir()) {
			rp.MountPoints = append(rp.MountPoints, mp.path)
		}
		log.V(4).Info("Reconstructed pod volumes", "podUID", uid, "volumes", len(rp.Volumes), "mounts", len(rp.MountPoints))
		pods = append(pods, rp)
	}
	return pods, nil
}
