package hostpath

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// stateFile is the name of the JSON record under the state dir.
const stateFile = "state.json"

// volume is what the driver knows of one volume. Its data lives at <statedir>/<ID>: a
// directory for a mount volume, a sparse file of Size bytes for a block volume.
type volume struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Size is the capacity in bytes; 0 for a mount volume created without one.
	Size  int64 `json:"size"`
	Block bool  `json:"block,omitempty"`
	// Ephemeral marks an inline ephemeral volume: made at NodePublishVolume, removed at
	// NodeUnpublishVolume, never seen by the controller service.
	Ephemeral bool `json:"ephemeral,omitempty"`
	// AttachedTo is the node the volume is ControllerPublished to, "" when detached.
	AttachedTo string `json:"attachedTo,omitempty"`
	// StagedAt is the staging_target_path of NodeStageVolume, "" when not staged.
	StagedAt string `json:"stagedAt,omitempty"`
	// LoopDevice is the loop device a staged block volume is attached to.
	LoopDevice string `json:"loopDevice,omitempty"`
	// Published maps each target_path of NodePublishVolume to how it was published.
	Published map[string]publication `json:"published,omitempty"`
}

// publication is one NodePublishVolume of a volume.
type publication struct {
	ReadOnly bool `json:"readOnly,omitempty"`
	// SingleWriter is set for SINGLE_NODE_SINGLE_WRITER: no other target may be published.
	SingleWriter bool `json:"singleWriter,omitempty"`
}

// state is every volume the driver knows, persisted as JSON so that a restarted driver
// finds its volumes, stagings and publications again. It is not safe for concurrent
// use: the driver holds its lock around every request.
type state struct {
	path    string
	Volumes map[string]*volume `json:"volumes"`
}

// loadState reads the state under dir, or starts an empty one when there is none.
func loadState(dir string) (*state, error) {
	s := &state{path: filepath.Join(dir, stateFile), Volumes: map[string]*volume{}}
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("parse %s: %w", s.path, err)
	}
	if s.Volumes == nil {
		s.Volumes = map[string]*volume{}
	}
	return s, nil
}

// save writes the state atomically: a crash leaves the old file or the new one.
func (s *state) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

// byName returns the volume created under name, nil if none.
func (s *state) byName(name string) *volume {
	for _, v := range s.Volumes {
		if v.Name == name && !v.Ephemeral {
			return v
		}
	}
	return nil
}

// controllerVolumes returns the volumes the controller service manages (not inline
// ephemeral ones), sorted by ID so that ListVolumes pages are stable.
func (s *state) controllerVolumes() []*volume {
	var out []*volume
	for _, v := range s.Volumes {
		if !v.Ephemeral {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// attachedTo counts the volumes ControllerPublished to node.
func (s *state) attachedTo(node string) int {
	n := 0
	for _, v := range s.Volumes {
		if v.AttachedTo == node {
			n++
		}
	}
	return n
}

// claimant returns the volume that has path as its staging path or one of its targets,
// nil if none.
func (s *state) claimant(path string) *volume {
	for _, v := range s.Volumes {
		if v.StagedAt == path {
			return v
		}
		if _, ok := v.Published[path]; ok {
			return v
		}
	}
	return nil
}
