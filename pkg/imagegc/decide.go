// Package imagegc is the node's image garbage collection, as the kubelet's:
// every five minutes it removes the images no container uses that have
// gone unused for longer than imageMaximumGCAge (when set), and, when the
// image filesystem is at imageGCHighThresholdPercent or above, as many
// unused images as bring it down to imageGCLowThresholdPercent, least
// recently used first, sparing those first seen less than
// imageMinimumGCAge ago. An image is in use while any container the
// runtime holds, running or not, was made from it or mounts it as an
// image volume; an image the runtime pins (the sandbox image, with
// containerd and CRI-O) is never removed. When and how recently an image
// was used is remembered in memory, from the agent's start, as the
// kubelet does.
//
// The decisions are pure functions of what was observed (this file);
// Collector (collector.go) observes the runtime and carries them out
// through CRI.
package imagegc

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Policy says which images go and when: KubeletConfiguration's image GC
// settings.
type Policy struct {
	// HighThresholdPercent is the usage of the image filesystem, in
	// percent, from which images are removed (imageGCHighThresholdPercent).
	HighThresholdPercent int
	// LowThresholdPercent is the usage removal aims for
	// (imageGCLowThresholdPercent).
	LowThresholdPercent int
	// MinAge: an image first seen less than this long ago is not removed
	// to free space: it may have been pulled for a container about to be
	// made (imageMinimumGCAge).
	MinAge time.Duration
	// MaxAge: an unused image is removed once unused for longer than
	// this, whatever the disk usage (imageMaximumGCAge); zero is off.
	MaxAge time.Duration
}

// DefaultPolicy is the kubelet's defaults.
var DefaultPolicy = Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}

// validate checks p as the kubelet's image GC manager does.
func (p Policy) validate() error {
	var errs []error
	if p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("high threshold %d%% is not in [0, 100]", p.HighThresholdPercent))
	}
	if p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("low threshold %d%% is not in [0, 100]", p.LowThresholdPercent))
	}
	if p.LowThresholdPercent > p.HighThresholdPercent {
		errs = append(errs, fmt.Errorf("low threshold %d%% is above the high threshold %d%%", p.LowThresholdPercent, p.HighThresholdPercent))
	}
	if p.MinAge < 0 || p.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("negative minimum (%s) or maximum (%s) age", p.MinAge, p.MaxAge))
	}
	return errors.Join(errs...)
}

// periodic says whether collections run at all: the kubelet runs none
// with the high threshold at 100% and no maximum age (its documented way
// to turn image GC off). Freeing space on request still works.
func (p Policy) periodic() bool { return p.HighThresholdPercent < 100 || p.MaxAge > 0 }

// record is what is remembered of an image between collections.
type record struct {
	// firstDetected is when a collection first saw the image.
	firstDetected time.Time
	// lastUsed is when a collection last saw a container use it; zero
	// when none has since the agent started.
	lastUsed time.Time
	size     uint64
	// pinned: the runtime asks for the image to be kept.
	pinned bool
	// runtimeHandler is the handler the image was pulled for, which its
	// removal names.
	runtimeHandler string
}

// track returns the records after a look at the runtime at now, and the
// IDs of the images in use: an image seen for the first time is detected
// now, one in use is used now, one gone is forgotten; sizes and pins are
// the runtime's latest. refs are what the containers name their images
// by (image IDs, digests, references of mounted image volumes). prev is
// not changed.
func track(prev map[string]record, images []*runtimeapi.Image, refs map[string]bool, now time.Time) (map[string]record, map[string]bool) {
	records := make(map[string]record, len(images))
	inUse := map[string]bool{}
	for _, img := range images {
		id := img.GetId()
		if id == "" {
			continue
		}
		r, ok := prev[id]
		if !ok {
			r = record{firstDetected: now}
		}
		if used(img, refs) {
			r.lastUsed = now
			inUse[id] = true
		}
		r.size, r.pinned, r.runtimeHandler = img.GetSize(), img.GetPinned(), img.GetSpec().GetRuntimeHandler()
		records[id] = r
	}
	return records, inUse
}

// used says whether a container names img: by its ID, as the kubelet
// matches, or by one of its repo digests, as a runtime may report a
// container's image_ref. A tag is not enough: it may have moved on to
// another image since the container was made.
func used(img *runtimeapi.Image, refs map[string]bool) bool {
	if refs[img.GetId()] {
		return true
	}
	for _, d := range img.GetRepoDigests() {
		if refs[d] {
			return true
		}
	}
	return false
}

// candidate is an image that may be removed.
type candidate struct {
	id string
	record
}

// evictionOrder returns the images that may be removed, neither in use
// nor pinned, in the order they go: least recently used first, then
// first detected first (the kubelet's order), then by ID.
func evictionOrder(records map[string]record, inUse map[string]bool) []candidate {
	var out []candidate
	for _, id := range slices.Sorted(maps.Keys(records)) {
		if r := records[id]; !inUse[id] && !r.pinned {
			out = append(out, candidate{id: id, record: r})
		}
	}
	slices.SortStableFunc(out, func(a, b candidate) int {
		if c := a.lastUsed.Compare(b.lastUsed); c != 0 {
			return c
		}
		return a.firstDetected.Compare(b.firstDetected)
	})
	return out
}

// expired splits order into the images unused for longer than maxAge and
// the rest, both in order. Nothing expires before the agent has run for
// maxAge (started is when it began collecting): until then it cannot
// know what was used before it started.
//
// An image no container has used since the agent started counts from
// when it was first detected. The kubelet counts it from the zero time,
// so it removes an image pulled and not yet used at its next collection;
// counting from detection keeps such an image (a pre-pulled one, one
// whose container is about to be made) for maxAge like any other.
func expired(order []candidate, now, started time.Time, maxAge time.Duration) (old, rest []candidate) {
	if maxAge <= 0 || now.Sub(started) <= maxAge {
		return nil, order
	}
	for _, c := range order {
		since := c.lastUsed
		if since.IsZero() {
			since = c.firstDetected
		}
		if now.Sub(since) > maxAge {
			old = append(old, c)
		} else {
			rest = append(rest, c)
		}
	}
	return old, rest
}

// fsUsage is the image filesystem's size and free space, in bytes.
type fsUsage struct {
	capacity, available int64
}

// toFree returns the image filesystem's usage in percent, as the kubelet
// counts it, and how many bytes to free to bring it down to the low
// threshold: zero below the high threshold. capacity must be positive.
func toFree(fs fsUsage, p Policy) (usagePercent int, need int64) {
	available := min(fs.available, fs.capacity)
	usagePercent = 100 - int(available*100/fs.capacity)
	if usagePercent < p.HighThresholdPercent {
		return usagePercent, 0
	}
	return usagePercent, fs.capacity*int64(100-p.LowThresholdPercent)/100 - available
}

// freeable picks from order the images that may go to free space: first
// detected at least minAge ago, and not used at or after now.
func freeable(order []candidate, now time.Time, minAge time.Duration) []candidate {
	var out []candidate
	for _, c := range order {
		if c.lastUsed.Before(now) && now.Sub(c.firstDetected) >= minAge {
			out = append(out, c)
		}
	}
	return out
}

// formatSize is a size as the kubelet's messages show it: "1.5 GiB".
func formatSize(bytes int64) string {
	const unit = 1024
	if bytes < unit {
		return fmt.Sprintf("%d B", bytes)
	}
	size, prefix := float64(bytes)/unit, 0
	for size >= unit && prefix < 3 {
		size /= unit
		prefix++
	}
	return fmt.Sprintf("%.1f %siB", size, strings.Split("K,M,G,T", ",")[prefix])
}
