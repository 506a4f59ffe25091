package hostpath

import (
	"fmt"
	"sort"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// supportedModes are the access modes of a single-node driver: every volume lives on one
// node, so no multi-node mode can be honoured.
var supportedModes = map[csi.VolumeCapability_AccessMode_Mode]bool{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  true,
}

// accessType says what a capability asks for.
type accessType int

const (
	accessMount accessType = iota
	accessBlock
)

// checkCapability validates one volume capability: it has an access type and a supported
// access mode. It returns the access type asked for.
func checkCapability(c *csi.VolumeCapability) (accessType, error) {
	if c == nil {
		return 0, fmt.Errorf("volume capability missing")
	}
	var t accessType
	switch {
	case c.GetBlock() != nil:
		t = accessBlock
	case c.GetMount() != nil:
		t = accessMount
	default:
		return 0, fmt.Errorf("volume capability has neither mount nor block access type")
	}
	if c.GetAccessMode() == nil {
		return 0, fmt.Errorf("volume capability has no access mode")
	}
	if m := c.GetAccessMode().GetMode(); !supportedModes[m] {
		return 0, fmt.Errorf("access mode %s not supported: volumes of this driver live on one node", m)
	}
	return t, nil
}

// checkCapabilities validates a list of capabilities, which must not be empty and must all
// ask for the same access type; it returns that type.
func checkCapabilities(caps []*csi.VolumeCapability) (accessType, error) {
	if len(caps) == 0 {
		return 0, fmt.Errorf("volume capabilities missing")
	}
	var first accessType
	for i, c := range caps {
		t, err := checkCapability(c)
		if err != nil {
			return 0, err
		}
		if i == 0 {
			first = t
		} else if t != first {
			return 0, fmt.Errorf("volume capabilities ask for both block and mount access")
		}
	}
	return first, nil
}

// fitsVolume says why a capability cannot be used with v, "" if it can.
func fitsVolume(t accessType, v *volume) string {
	switch {
	case t == accessBlock && !v.Block:
		return fmt.Sprintf("volume %s is a mount volume, not a block volume", v.ID)
	case t == accessMount && v.Block:
		return fmt.Sprintf("volume %s is a block volume, not a mount volume", v.ID)
	}
	return ""
}

// isSingleWriter says whether the capability asks that only one target use the volume.
func isSingleWriter(c *csi.VolumeCapability) bool {
	return c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
}

// isReadOnlyMode says whether the capability's mode allows reads only.
func isReadOnlyMode(c *csi.VolumeCapability) bool {
	m := c.GetAccessMode().GetMode()
	return m == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		m == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// mountFlags are the options of a mount capability this driver honours on its bind
// mounts; the others (file system options) mean nothing for a directory and are ignored.
var mountFlags = map[string]bool{"ro": true, "nosuid": true, "nodev": true, "noexec": true}

// bindOptions returns the options to apply to a publication's bind mount, sorted.
func bindOptions(c *csi.VolumeCapability, readOnly bool) []string {
	set := map[string]bool{}
	if readOnly || isReadOnlyMode(c) {
		set["ro"] = true
	}
	for _, f := range c.GetMount().GetMountFlags() {
		if mountFlags[f] {
			set[f] = true
		}
	}
	opts := make([]string, 0, len(set))
	for f := range set {
		opts = append(opts, f)
	}
	sort.Strings(opts)
	return opts
}

// publishConflict says why publishing v at target with capability c must fail with
// FailedPrecondition, "" if it need not: a single-writer volume may be published at one
// target only.
func publishConflict(v *volume, target string, c *csi.VolumeCapability) string {
	for other, p := range v.Published {
		if other == target {
			continue
		}
		if isSingleWriter(c) || p.SingleWriter {
			return fmt.Sprintf("volume %s is published at %s with the single-writer access mode", v.ID, other)
		}
	}
	return ""
}
