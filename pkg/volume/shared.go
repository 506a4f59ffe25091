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
	mps, err := m.mounter.mountPoints("")
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

// mountHolding finds the mount that holds path: the last line of the mount table whose
// mount point is path or an ancestor of it. Lines come in the order of mounting, and a
// later mount hides whatever it covers: one deeper down sits on top of its parent, one
// higher up (a bind over /var/lib, say) hides the deeper mounts made before it.
func mountHolding(mps []mountPoint, path string) (mountPoint, bool) {
	var best mountPoint
	found := false
	for _, mp := range mps {
		p := filepath.Clean(mp.path)
		if p != "/" && p != path && !strings.HasPrefix(path, p+"/") {
			continue
		}
		best, found = mp, true
	}
	return best, found
}
