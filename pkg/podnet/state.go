package podnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeagent/nodeagent/pkg/atomicfile"
)

// StateFileName is the record, under the agent's root dir, of what the pod
// network made on this machine. It exists from before the first change
// until everything is removed again, so that an agent started with the
// setting off knows what to take away, even after a crash.
const StateFileName = "pod-network.json"

// state is what the pod network made.
type state struct {
	// Conflist is the CNI configuration file written.
	Conflist string `json:"conflist"`
	// Bridge is the bridge device the CNI bridge plugin makes.
	Bridge string `json:"bridge"`
	// IPAMDataDir holds host-local's address allocations.
	IPAMDataDir string `json:"ipamDataDir"`
	// RouteProtocol marks the routes made.
	RouteProtocol int `json:"routeProtocol"`
	// Rules are the iptables rules added.
	Rules []Rule `json:"rules,omitempty"`
}

// readState reads the state file; a missing file is (nil, nil).
func readState(path string) (*state, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pod network state: %w", err)
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read pod network state %s: %w", path, err)
	}
	return &s, nil
}

// writeState writes the state file atomically.
func writeState(path string, s *state) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o600)
}

// writeFileAtomic makes path's directory and replaces the file at once: a
// reader (the runtime watching the CNI directory) sees the old content or
// the new, never a part.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, mode)
}
