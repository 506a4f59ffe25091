package main

import (
	"sort"
	"time"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

// The rows of a start's breakdown that are no step: the time before the agent's first step,
// the time between its steps, and the time after its last one.
const (
	// rowBeforeAdmit runs from the pod's creation request to the start of its first step
	// (admit): the apiserver, the scheduler and the agent's watch.
	rowBeforeAdmit = "beforeAdmit"
	// rowQueueWait is the time between the first step's start and the last step's end that
	// no step covers: the pod waiting for its worker, for a status pass, for a lock.
	rowQueueWait = "queueWait"
	// rowStatusSeen runs from the end of the last step to the watch seeing the containers
	// started: the status computed, written, and sent back by the apiserver.
	rowStatusSeen = "statusSeen"
)

// startSteps is where the start of a round's pods went, step by step: one row per step kind
// (createContainer:sleep counts as createContainer) and one per row* above.
type startSteps struct {
	// Pods is how many pods' starts are in it; Missing how many had none to give (no
	// timeline, or no container started in it).
	Pods    int `json:"pods"`
	Missing int `json:"missing,omitempty"`
	// Start is each pod's start as divided here: from its creation request (the floor: its
	// first CRI call) to its containers seen started.
	Start Dist `json:"startSeconds"`
	// Steps are in the order a pod takes them (by the median time of their first start),
	// rowBeforeAdmit first, rowQueueWait and rowStatusSeen last.
	Steps []stepFigures `json:"steps"`
}

// stepFigures is one row of a startSteps.
type stepFigures struct {
	// Step is a step kind (timeline.Step.Kind) or a row* constant.
	Step string `json:"step"`
	// Pods is how many pods took the step. The row* figures are over every pod (a wait of
	// zero is a wait), and a row* that is zero for every pod is left out.
	Pods int `json:"pods"`
	// Failed counts the failed attempts of the step, over all pods; their time is in Seconds.
	Failed int `json:"failed,omitempty"`
	// Seconds is the step's time per pod, summed over the pod's attempts and containers.
	Seconds Dist `json:"seconds"`
	// ShareP50 is the median over those pods of the fraction of the pod's start it took.
	ShareP50 float64 `json:"shareP50"`
}

// podStart is one pod's start as the breakdown reads it.
type podStart struct {
	// created and started are when the pod was created and its containers seen started,
	// on the bench's clock; the agent runs on the same machine, so its steps' times are on
	// the same clock. Zero when not known: the start then runs from the first step's
	// start, or to the end of the last successful startContainer step.
	created, started time.Time
	steps            []timeline.Step
}

// span is one pod's time at one row, as breakdown collects it.
type span struct {
	seconds, share float64
	offset         time.Duration // from the first step's start to the kind's first start
	failed         int
}

// breakdown aggregates the starts of a round's pods. Only the steps that began before the
// pod's containers were seen started count (not "ready", not the steps of its end), each
// cut off there.
func breakdown(pods []podStart) *startSteps {
	out := &startSteps{}
	rows := map[string][]span{}
	var starts []float64
	for _, p := range pods {
		spans, total, ok := podSpans(p)
		if !ok {
			out.Missing++
			continue
		}
		out.Pods++
		starts = append(starts, total.Seconds())
		for row, s := range spans {
			rows[row] = append(rows[row], s)
		}
	}
	out.Start = dist(starts)
	for row, spans := range rows {
		if pseudoRow(row) && allZero(spans) {
			continue
		}
		f := stepFigures{Step: row, Pods: len(spans)}
		var secs, shares []float64
		for _, s := range spans {
			secs, shares = append(secs, s.seconds), append(shares, s.share)
			f.Failed += s.failed
		}
		f.Seconds, f.ShareP50 = dist(secs), dist(shares).P50
		out.Steps = append(out.Steps, f)
	}
	order := map[string]float64{}
	for row, spans := range rows {
		var offs []float64
		for _, s := range spans {
			offs = append(offs, s.offset.Seconds())
		}
		order[row] = dist(offs).P50
	}
	sort.Slice(out.Steps, func(i, j int) bool {
		a, b := out.Steps[i].Step, out.Steps[j].Step
		if ra, rb := rowRank(a), rowRank(b); ra != rb {
			return ra < rb
		}
		if order[a] != order[b] {
			return order[a] < order[b]
		}
		return a < b
	})
	return out
}

// podSpans divides one pod's start into its rows; ok is false when the pod has no start to
// divide.
func podSpans(p podStart) (spans map[string]span, total time.Duration, ok bool) {
	if len(p.steps) == 0 {
		return nil, 0, false
	}
	first := p.steps[0].Start
	for _, st := range p.steps {
		if st.Start.Before(first) {
			first = st.Start
		}
	}
	begin, end := p.created, p.started
	if begin.IsZero() {
		begin = first
	}
	if end.IsZero() {
		for _, st := range p.steps {
			if st.Kind() == "startContainer" && st.Outcome == timeline.Done && st.End.After(end) {
				end = st.End
			}
		}
	}
	if end.IsZero() || !end.After(begin) {
		return nil, 0, false
	}
	total = end.Sub(begin)
	spans = map[string]span{}
	add := func(row string, d time.Duration, offset time.Duration, failed bool) {
		s, seen := spans[row]
		if !seen || offset < s.offset {
			s.offset = offset
		}
		s.seconds += d.Seconds()
		s.share = s.seconds / total.Seconds()
		if failed {
			s.failed++
		}
		spans[row] = s
	}
	var taken []interval
	for _, st := range p.steps {
		if !st.Start.Before(end) {
			continue
		}
		to := st.End
		if to.IsZero() || to.After(end) {
			to = end // in progress, or past the start
		}
		from := st.Start
		if from.Before(begin) {
			from = begin // a clock off by a little: nothing before the creation
		}
		if to.Before(from) {
			to = from
		}
		add(st.Kind(), to.Sub(from), st.Start.Sub(first), st.Outcome == timeline.Failed)
		taken = append(taken, interval{from, to})
	}
	if len(taken) == 0 {
		return nil, 0, false
	}
	covered, from, to := union(taken)
	add(rowBeforeAdmit, max(from.Sub(begin), 0), 0, false)
	add(rowQueueWait, to.Sub(from)-covered, 0, false)
	add(rowStatusSeen, max(end.Sub(to), 0), 0, false)
	return spans, total, true
}

type interval struct{ from, to time.Time }

// union is how long the intervals cover together, and from the first one's start to the
// last end.
func union(ivs []interval) (covered time.Duration, from, to time.Time) {
	s := append([]interval(nil), ivs...)
	sort.Slice(s, func(i, j int) bool { return s[i].from.Before(s[j].from) })
	from, to = s[0].from, s[0].to
	cur := s[0]
	for _, iv := range s[1:] {
		if iv.from.After(cur.to) {
			covered += cur.to.Sub(cur.from)
			cur = iv
		} else if iv.to.After(cur.to) {
			cur.to = iv.to
		}
		if iv.to.After(to) {
			to = iv.to
		}
	}
	covered += cur.to.Sub(cur.from)
	return covered, from, to
}

func pseudoRow(row string) bool {
	return row == rowBeforeAdmit || row == rowQueueWait || row == rowStatusSeen
}

// rowRank puts rowBeforeAdmit first and rowQueueWait, rowStatusSeen last.
func rowRank(row string) int {
	switch row {
	case rowBeforeAdmit:
		return 0
	case rowQueueWait:
		return 2
	case rowStatusSeen:
		return 3
	}
	return 1
}

func allZero(spans []span) bool {
	for _, s := range spans {
		if s.seconds != 0 {
			return false
		}
	}
	return true
}
