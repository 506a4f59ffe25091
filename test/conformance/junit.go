package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strings"
)

// junitSuites is the part of a ginkgo JUnit report the summary reads.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *junitText `xml:"failure"`
	Error   *junitText `xml:"error"`
}

type junitText struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// Spec is the outcome of one spec (or of a suite-level node that did not pass).
type Spec struct {
	// Name is the spec's full text, labels included ("[sig-node] Pods should get a host
	// IP [NodeConformance] [Conformance]"); suite-level nodes keep their "[Node]" prefix.
	Name string
	// State is ginkgo's: passed, failed, skipped, timedout, panicked, interrupted, aborted.
	State string
	// Seconds the spec ran.
	Seconds float64
	// Reason is the first line of the failure, or why the spec skipped itself.
	Reason string
}

// Failed reports whether the spec counts as a failure.
func (s Spec) Failed() bool {
	switch s.State {
	case "passed", "skipped", "pending":
		return false
	}
	return true
}

// Summary is what one run of the suite gives.
type Summary struct {
	Passed, Failed int
	// Skipped counts the selected specs that skipped themselves at run time (a missing
	// feature, a provider they need); the specs the focus left out are not counted.
	Skipped int
	// Specs are the selected specs (and failed suite-level nodes) sorted by name.
	Specs []Spec
}

// ParseJUnit reads the JUnit report e2e.test writes (junit_01.xml) into a summary.
func ParseJUnit(r io.Reader) (*Summary, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("parse junit report: %w", err)
	}
	s := &Summary{}
	for _, suite := range doc.Suites {
		for _, c := range suite.Cases {
			spec := Spec{Name: c.Name, State: c.Status, Seconds: c.Time}
			isIt := strings.HasPrefix(c.Name, "[It] ")
			if isIt {
				spec.Name = strings.TrimPrefix(c.Name, "[It] ")
			}
			switch {
			case c.Status == "passed":
				if !isIt {
					continue // suite setup and reporting nodes
				}
				s.Passed++
			case c.Status == "skipped" || c.Status == "pending":
				// Ginkgo writes "skipped" for specs the focus left out and
				// "skipped - REASON" for a Skip() at run time.
				reason, skippedAtRunTime := "", false
				if c.Skipped != nil {
					reason, skippedAtRunTime = strings.CutPrefix(c.Skipped.Message, "skipped - ")
				}
				if !isIt || !skippedAtRunTime {
					continue
				}
				spec.Reason = firstLine(reason)
				s.Skipped++
			default:
				text := c.Failure
				if text == nil {
					text = c.Error
				}
				if text != nil {
					spec.Reason = failureLine(text.Message, text.Text)
				}
				s.Failed++
			}
			s.Specs = append(s.Specs, spec)
		}
	}
	sort.SliceStable(s.Specs, func(i, j int) bool { return s.Specs[i].Name < s.Specs[j].Name })
	return s, nil
}

// failureLine picks the first line that says what went wrong: the message attribute when
// ginkgo wrote one, else the description's first line without its "[FAILED]" tag.
func failureLine(message, text string) string {
	if l := firstLine(message); l != "" {
		return l
	}
	l := firstLine(text)
	for _, tag := range []string{"[FAILED]", "[TIMEDOUT]", "[PANICKED]", "[INTERRUPTED]", "[ABORTED]"} {
		if rest, ok := strings.CutPrefix(l, tag); ok {
			return strings.TrimSpace(rest)
		}
	}
	return l
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// Line is the closing line of a run: "N passed, N failed".
func (s *Summary) Line() string { return fmt.Sprintf("%d passed, %d failed", s.Passed, s.Failed) }

// GroupCount is how many specs of one group ran and passed.
type GroupCount struct {
	Group                   string
	Passed, Failed, Skipped int
}

// Groups counts the specs by Group, in a stable order (by name).
func (s *Summary) Groups() []GroupCount { return s.GroupsBy(Group) }

// GroupsBy counts the specs by the group that group names for each.
func (s *Summary) GroupsBy(group func(spec string) string) []GroupCount {
	by := map[string]*GroupCount{}
	for _, sp := range s.Specs {
		g := group(sp.Name)
		if by[g] == nil {
			by[g] = &GroupCount{Group: g}
		}
		switch {
		case sp.Failed():
			by[g].Failed++
		case sp.State == "passed":
			by[g].Passed++
		default:
			by[g].Skipped++
		}
	}
	out := make([]GroupCount, 0, len(by))
	for _, g := range by {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// WriteText writes the human-readable summary: counts, per-group counts, then every
// failure and run-time skip with its first line.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d passed, %d failed, %d skipped\n\nby group (passed/failed/skipped):\n", s.Passed, s.Failed, s.Skipped)
	for _, g := range s.Groups() {
		fmt.Fprintf(&b, "  %-45s %3d %3d %3d\n", g.Group, g.Passed, g.Failed, g.Skipped)
	}
	for _, section := range []struct {
		title string
		match func(Spec) bool
	}{
		{"failed", Spec.Failed},
		{"skipped at run time", func(sp Spec) bool { return sp.State == "skipped" || sp.State == "pending" }},
	} {
		first := true
		for _, sp := range s.Specs {
			if !section.match(sp) {
				continue
			}
			if first {
				fmt.Fprintf(&b, "\n%s:\n", section.title)
				first = false
			}
			fmt.Fprintf(&b, "- %s\n    %s: %s\n", sp.Name, sp.State, sp.Reason)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
