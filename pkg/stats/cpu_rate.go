package stats

import (
	"sync"
	"time"
)

// cpuRates turns cumulative CPU time into a rate (usageNanoCores), per
// cgroup or container: the rate is measured between the newest reading
// and a baseline at least minWindow older, so that two requests a few
// milliseconds apart do not give a rate from noise. The periodic
// housekeeping keeps baselines fresh, so the first request already has
// one.
type cpuRates struct {
	minWindow time.Duration
	// forgetAfter drops the state of what has not been read for this long.
	forgetAfter time.Duration

	mu    sync.Mutex
	state map[string]*rateState
}

type rateState struct {
	base     cpuReading
	rate     uint64
	hasRate  bool
	lastSeen time.Time
}

type cpuReading struct {
	at    time.Time
	usage uint64 // nanoseconds of CPU time
}

func newCPURates(minWindow, forgetAfter time.Duration) *cpuRates {
	return &cpuRates{minWindow: minWindow, forgetAfter: forgetAfter, state: map[string]*rateState{}}
}

// observe takes a reading of key and returns its usage in nanocores, or
// nil when there is no baseline old enough yet.
func (r *cpuRates) observe(key string, at time.Time, usage uint64) *uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.state[key]
	reading := cpuReading{at: at, usage: usage}
	if !ok || usage < s.base.usage || !at.After(s.base.at) {
		// New, or the counter restarted (a new cgroup under an old name),
		// or the clock went back: start over.
		r.state[key] = &rateState{base: reading, lastSeen: at}
		return nil
	}
	s.lastSeen = at
	if elapsed := at.Sub(s.base.at); elapsed >= r.minWindow {
		s.rate = uint64(float64(usage-s.base.usage) / elapsed.Seconds())
		s.hasRate = true
		s.base = reading
	}
	if !s.hasRate {
		return nil
	}
	v := s.rate
	return &v
}

// seenSince says whether key was read after t.
func (r *cpuRates) seenSince(key string, t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.state[key]
	return ok && s.lastSeen.After(t)
}

// forget drops the state of keys not read since before now-forgetAfter.
func (r *cpuRates) forget(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, s := range r.state {
		if now.Sub(s.lastSeen) > r.forgetAfter {
			delete(r.state, k)
		}
	}
}
