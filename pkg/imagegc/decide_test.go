package imagegc

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is t0 plus m minutes.
func at(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }

func ids(cs []candidate) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.id)
	}
	return strings.Join(out, " ")
}

// choice is what one collection would pick, all removals succeeding.
type choice struct {
	// input: the records, the images in use, when, the policy and the
	// image filesystem after the expired images are gone.
	records map[string]record
	inUse   map[string]bool
	now     time.Time
	started time.Time
	policy  Policy
	fs      fsUsage
}

// choose runs a collection's decisions in their order: the expired
// images, then those freeable to reach the low threshold, and the bytes
// that needs.
func choose(c choice) (old, space []candidate, usage int, need int64) {
	order := evictionOrder(c.records, c.inUse)
	old, rest := expired(order, c.now, c.started, c.policy.MaxAge)
	usage, need = toFree(c.fs, c.policy)
	if need > 0 {
		space = freeable(rest, c.now, c.policy.MinAge)
	}
	return old, space, usage, need
}

func TestChoose(t *testing.T) {
	// base: ten minutes after the agent started, the kubelet's policy, a
	// disk of 1000 bytes 80% full. Never used since start: "never" and
	// "pause" (pinned); last used a minute in: "a"; six minutes in:
	// "recent", first seen five minutes in; in use now: "running".
	base := func() choice {
		return choice{
			records: map[string]record{
				"never":   {firstDetected: at(0), size: 200},
				"a":       {firstDetected: at(0), lastUsed: at(1), size: 100},
				"recent":  {firstDetected: at(5), lastUsed: at(6), size: 300},
				"pause":   {firstDetected: at(0), size: 400, pinned: true},
				"running": {firstDetected: at(0), lastUsed: at(10), size: 500},
			},
			inUse:   map[string]bool{"running": true},
			now:     at(10),
			started: at(0),
			policy:  DefaultPolicy,
			fs:      fsUsage{capacity: 1000, available: 200},
		}
	}
	available := func(b int64) func(*choice) { return func(c *choice) { c.fs.available = b } }
	maxAge := func(m int) func(*choice) {
		return func(c *choice) { c.policy.MaxAge = time.Duration(m) * time.Minute }
	}
	tests := []struct {
		name  string
		mut   []func(*choice)
		old   string
		space string
		usage int
		need  int64
	}{
		{name: "below the high threshold nothing goes",
			usage: 80},
		{name: "at the high threshold the unused go least recently used first, to reach the low threshold",
			mut:   []func(*choice){available(150)},
			usage: 85, need: 50, space: "never a recent"},
		{name: "a full disk needs the low threshold's free space",
			mut:   []func(*choice){available(0)},
			usage: 100, need: 200, space: "never a recent"},
		{name: "free space above the capacity counts as the capacity",
			mut:   []func(*choice){available(5000)},
			usage: 0},
		{name: "an image first seen less than the minimum age ago stays",
			mut:   []func(*choice){available(100), func(c *choice) { c.policy.MinAge = 6 * time.Minute }},
			usage: 90, need: 100, space: "never a"},
		{name: "ties on last use go by first detection, then by ID",
			mut: []func(*choice){available(100), func(c *choice) {
				c.records["b"] = record{firstDetected: at(0), lastUsed: at(1), size: 1}
				c.records["0"] = record{firstDetected: at(2), lastUsed: at(1), size: 1}
			}},
			usage: 90, need: 100, space: "never a b 0 recent"},
		{name: "an image in use stays whenever it was last seen used",
			mut: []func(*choice){available(0), func(c *choice) {
				r := c.records["running"]
				r.lastUsed = at(1)
				c.records["running"] = r
			}},
			usage: 100, need: 200, space: "never a recent"},
		{name: "high threshold 100: images go only from a full disk",
			mut:   []func(*choice){available(5), func(c *choice) { c.policy.HighThresholdPercent = 100 }},
			usage: 100, need: 195, space: "never a recent"},
		{name: "high threshold 100: 99% is not full",
			mut:   []func(*choice){available(10), func(c *choice) { c.policy.HighThresholdPercent = 100 }},
			usage: 99},
		{name: "maximum age: the unused for longer go whatever the disk usage",
			mut: []func(*choice){maxAge(8)},
			old: "never a", usage: 80},
		{name: "maximum age: last use exactly that long ago stays",
			mut: []func(*choice){maxAge(9)},
			old: "never", usage: 80},
		{name: "maximum age: nothing goes before the agent has run that long",
			mut:   []func(*choice){maxAge(8), func(c *choice) { c.started = at(3) }},
			usage: 80},
		{name: "maximum age: an image never used counts from its detection",
			mut: []func(*choice){maxAge(8), func(c *choice) {
				r := c.records["never"]
				r.firstDetected = at(5)
				c.records["never"] = r
			}},
			old: "a", usage: 80},
		{name: "maximum age and a full disk: what is left after the expired goes for space",
			mut: []func(*choice){maxAge(8), available(0)},
			old: "never a", usage: 100, need: 200, space: "recent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			for _, m := range tt.mut {
				m(&c)
			}
			old, space, usage, need := choose(c)
			if got := ids(old); got != tt.old {
				t.Errorf("expired: %q, want %q", got, tt.old)
			}
			if got := ids(space); got != tt.space {
				t.Errorf("for space, in order: %q, want %q", got, tt.space)
			}
			if usage != tt.usage || need != tt.need {
				t.Errorf("usage %d%%, need %d bytes; want %d%%, %d", usage, need, tt.usage, tt.need)
			}
		})
	}
}

func TestTrack(t *testing.T) {
	image := func(id string, size uint64, mut ...func(*runtimeapi.Image)) *runtimeapi.Image {
		img := &runtimeapi.Image{Id: id, Size: size, Spec: &runtimeapi.ImageSpec{Image: id}}
		for _, m := range mut {
			m(img)
		}
		return img
	}
	digest := func(d string) func(*runtimeapi.Image) {
		return func(img *runtimeapi.Image) { img.RepoDigests = append(img.RepoDigests, d) }
	}
	tag := func(tg string) func(*runtimeapi.Image) {
		return func(img *runtimeapi.Image) { img.RepoTags = append(img.RepoTags, tg) }
	}
	pinned := func(img *runtimeapi.Image) { img.Pinned = true }
	handler := func(img *runtimeapi.Image) { img.Spec.RuntimeHandler = "kata" }

	prev := map[string]record{
		"sha256:known": {firstDetected: at(0), lastUsed: at(1), size: 1},
		"sha256:gone":  {firstDetected: at(0), size: 1},
	}
	before := maps.Clone(prev)
	images := []*runtimeapi.Image{
		image("sha256:known", 10),
		image("sha256:new", 20, pinned, handler),
		image("sha256:by-id", 30),
		image("sha256:by-digest", 40, digest("reg/app@sha256:d")),
		image("sha256:by-tag", 50, tag("reg/app:1")),
		{Size: 60}, // no ID: nothing to remove it by
	}
	refs := map[string]bool{"sha256:by-id": true, "reg/app@sha256:d": true, "reg/app:1": true}
	got, inUse := track(prev, images, refs, at(5))

	want := map[string]record{
		"sha256:known":     {firstDetected: at(0), lastUsed: at(1), size: 10},
		"sha256:new":       {firstDetected: at(5), size: 20, pinned: true, runtimeHandler: "kata"},
		"sha256:by-id":     {firstDetected: at(5), lastUsed: at(5), size: 30},
		"sha256:by-digest": {firstDetected: at(5), lastUsed: at(5), size: 40},
		"sha256:by-tag":    {firstDetected: at(5), size: 50},
	}
	if !maps.Equal(got, want) {
		t.Errorf("records:\n got %v\nwant %v", got, want)
	}
	if got := slices.Sorted(maps.Keys(inUse)); !slices.Equal(got, []string{"sha256:by-digest", "sha256:by-id"}) {
		t.Errorf("in use: %v, want the images named by ID or digest (a tag may have moved on)", got)
	}
	if !maps.Equal(prev, before) {
		t.Error("track changed the records it was given")
	}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*Policy)
		ok   bool
	}{
		{name: "the kubelet's defaults", mut: func(*Policy) {}, ok: true},
		{name: "high 100 (off but for a full disk)", mut: func(p *Policy) { p.HighThresholdPercent = 100 }, ok: true},
		{name: "low equal to high", mut: func(p *Policy) { p.LowThresholdPercent = 85 }, ok: true},
		{name: "high above 100", mut: func(p *Policy) { p.HighThresholdPercent = 101 }},
		{name: "negative low", mut: func(p *Policy) { p.LowThresholdPercent = -1 }},
		{name: "low above high", mut: func(p *Policy) { p.LowThresholdPercent = 90 }},
		{name: "negative minimum age", mut: func(p *Policy) { p.MinAge = -time.Second }},
		{name: "negative maximum age", mut: func(p *Policy) { p.MaxAge = -time.Second }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy
			tt.mut(&p)
			if err := p.validate(); (err == nil) != tt.ok {
				t.Errorf("validate: %v, want ok %t", err, tt.ok)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for in, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB",
		100 << 30: "100.0 GiB", 3 << 40: "3.0 TiB", 2048 << 40: "2048.0 TiB",
	} {
		if got := formatSize(in); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", in, got, want)
		}
	}
}
