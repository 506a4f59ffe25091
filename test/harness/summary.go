package harness

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// buildRecord collects, for the summary at the end of a run that built something, how long
// each step took and what was built during it. A nil *buildRecord records nothing.
type buildRecord struct {
	mu      sync.Mutex
	step    string // the step under way, "" between steps
	pending []builtThing
	entries []recordEntry
}

// recordEntry is a step, or a build outside any step.
type recordEntry struct {
	name  string
	took  time.Duration
	built []builtThing
}

type builtThing struct {
	what string
	took time.Duration
}

// beginStep notes that a step starts: builds from now on belong to it.
func (r *buildRecord) beginStep(name string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.step, r.pending = name, nil
}

// endStep notes how long the step took.
func (r *buildRecord) endStep(name string, took time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, recordEntry{name: name, took: took, built: r.pending})
	r.step, r.pending = "", nil
}

// noteBuild notes a finished build, of what, which made made: in the step under way, or as
// an entry of its own named what.
func (r *buildRecord) noteBuild(what, made string, took time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := builtThing{what: made, took: took}
	if r.step != "" {
		r.pending = append(r.pending, b)
		return
	}
	r.entries = append(r.entries, recordEntry{name: what, took: took, built: []builtThing{b}})
}

// take returns the entries recorded so far and starts afresh.
func (r *buildRecord) take() []recordEntry {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entries
	r.entries, r.step, r.pending = nil, "", nil
	return e
}

// summaryLines is the summary of a run that took total: nothing if nothing was built;
// otherwise the total and the time spent building, then each entry that took a second or
// more (with what was built in it), then the rest in one line.
func summaryLines(entries []recordEntry, total time.Duration) []string {
	var building time.Duration
	for _, e := range entries {
		for _, b := range e.built {
			building += b.took
		}
	}
	if building == 0 {
		return nil
	}
	width := len("total")
	for _, e := range entries {
		if len(e.name) > width {
			width = len(e.name)
		}
	}
	lines := []string{fmt.Sprintf("summary: %s in all, %s of it building what later runs take from the cache",
		roundDuration(total), roundDuration(building))}
	var rest int
	var restTook time.Duration
	for _, e := range entries {
		if e.took < time.Second && len(e.built) == 0 {
			rest++
			restTook += e.took
			continue
		}
		line := fmt.Sprintf("  %-*s %8s", width, e.name, roundDuration(e.took))
		if len(e.built) > 0 {
			var bs []string
			for _, b := range e.built {
				bs = append(bs, fmt.Sprintf("%s in %s", b.what, roundDuration(b.took)))
			}
			line += "  built " + strings.Join(bs, "; ")
		}
		lines = append(lines, line)
	}
	if rest > 0 {
		lines = append(lines, fmt.Sprintf("  %-*s %8s", width, fmt.Sprintf("%d more steps", rest), roundDuration(restTook)))
	}
	return append(lines, fmt.Sprintf("  %-*s %8s", width, "total", roundDuration(total)))
}

// ReportBuilds logs, if anything was built since the last report, a summary: each step's
// time (and each build's, outside steps) with what was built, and the time since start as
// the total. Up ends with it; callers that build before or without Up (the conformance
// runner, `harness build`) call it when their builds are done.
func (c *Config) ReportBuilds(start time.Time) {
	for _, l := range summaryLines(c.record.take(), time.Since(start)) {
		c.Logf("%s", l)
	}
}
