package volume

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// MakeRootShared makes the root directory a shared mount, as the kubelet
// does with its own at start-up, so that mounts below it propagate into
// containers that ask for HostToContainer and out of privileged ones that
// ask for Bidirectional. A root directory that is not a mount point is
// bind-mounted onto itself first; one already shared is left alone, so a
// restarted agent changes nothing.
func (m *Manager) MakeRootShared() error {
	root := m.layout.Root()
	mps, err := m.mounter.mountPoints()
	if err != nil {
		return err
	}
	holder, ok := mountHolding(mps, root)
	if ok && holder.shared {
		return nil
	}
	if !ok || holder.path != root {
		if err := m.mounter.mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("make root dir shared: %w", err)
		}
	}
	if err := m.mounter.mount("", root, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make root dir shared: %w", err)
	}
	return nil
}

// mountHolding finds the mount whose mount point is path or its nearest
// ancestor: the last such line wins, as a later mount hides an earlier one.
func mountHolding(mps []mountPoint, path string) (mountPoint, bool) {
	var best mountPoint
	found := false
	for _, mp := range mps {
		p := filepath.Clean(mp.path)
		if p != "/" && p != path && !strings.HasPrefix(path, p+"/") {
			continue
		}
		if !found || len(p) >= len(filepath.Clean(best.path)) {
			best, found = mp, true
		}
	}
	return best, found
}
