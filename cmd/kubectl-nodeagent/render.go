package main

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

// barWidth is the width of the waterfall's bars in the terminal.
const barWidth = 40

// row is one step placed on the waterfall.
type row struct {
	timeline.Step
	offset, duration time.Duration
	// from and width place the bar, as fractions of the total.
	from, width float64
}

// layout places the steps: offsets from the pod's first step, bars
// scaled to the whole span.
func layout(t timeline.Timeline) ([]row, time.Duration) {
	if len(t.Steps) == 0 {
		return nil, 0
	}
	first, last := t.Steps[0].Start, t.Steps[0].Start
	for _, s := range t.Steps {
		if s.Start.Before(first) {
			first = s.Start
		}
		if end := stepEnd(s); end.After(last) {
			last = end
		}
	}
	total := last.Sub(first)
	rows := make([]row, 0, len(t.Steps))
	for _, s := range t.Steps {
		r := row{Step: s, offset: s.Start.Sub(first), duration: stepEnd(s).Sub(s.Start)}
		if total > 0 {
			r.from, r.width = float64(r.offset)/float64(total), float64(r.duration)/float64(total)
		}
		rows = append(rows, r)
	}
	return rows, total
}

// stepEnd is when the step ended, or how far it got when the agent
// answered.
func stepEnd(s timeline.Step) time.Time {
	if !s.End.IsZero() {
		return s.End
	}
	return s.Start.Add(time.Duration(s.DurationSeconds * float64(time.Second)))
}

// outcome is the step's outcome as shown.
func outcome(s timeline.Step) string {
	out := string(s.Outcome)
	if s.Cached {
		out += " (image present)"
	}
	if s.Repeats > 0 {
		out += fmt.Sprintf(" (x%d)", s.Repeats+1)
	}
	return out
}

// human shows a duration short and readable.
func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// bar draws one step's bar: at least one cell, so that no step vanishes.
func bar(r row) string {
	from := int(r.from * barWidth)
	from = min(from, barWidth-1)
	n := max(int(r.width*barWidth+0.5), 1)
	n = min(n, barWidth-from)
	fill := "█"
	switch r.Outcome {
	case timeline.Failed:
		fill = "▒"
	case timeline.InProgress:
		fill = "░"
	}
	return strings.Repeat(" ", from) + strings.Repeat(fill, n) + strings.Repeat(" ", barWidth-from-n)
}

// renderWaterfall draws the timeline in the terminal: one line per step,
// its offset from the pod's first step, its bar, duration and outcome,
// and under a failed step its error.
func renderWaterfall(w io.Writer, t timeline.Timeline, node string) error {
	rows, total := layout(t)
	var b strings.Builder
	fmt.Fprintf(&b, "Pod %s/%s (uid %s) on node %s: %d steps in %s\n", t.Namespace, t.Name, t.UID, node, len(rows), human(total))
	if t.Dropped > 0 {
		fmt.Fprintf(&b, "(%d steps between the start and the latest were not kept)\n", t.Dropped)
	}
	nameWidth := len("STEP")
	for _, r := range rows {
		nameWidth = max(nameWidth, len(r.Name))
	}
	fmt.Fprintf(&b, "%-*s  %9s  %-*s  %9s  %s\n", nameWidth, "STEP", "START", barWidth+2, "", "DURATION", "OUTCOME")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-*s  %9s  |%s|  %9s  %s\n", nameWidth, r.Name, "+"+human(r.offset), bar(r), human(r.duration), outcome(r.Step))
		if r.Error != "" {
			fmt.Fprintf(&b, "%-*s  error: %s\n", nameWidth, "", r.Error)
		}
	}
	if s := t.Status; s != nil {
		fmt.Fprintf(&b, "Status: %s, ready %v\n", s.Phase, s.Ready)
		for _, c := range s.Waiting {
			fmt.Fprintf(&b, "  %s waiting: %s %s\n", c.Container, c.Reason, c.Message)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// renderWhy prints the answer to "why is this pod not running?".
func renderWhy(w io.Writer, y timeline.Why, node string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Pod %s/%s on node %s: %s\n", y.Namespace, y.Name, node, y.Summary)
	if y.Step != "" {
		fmt.Fprintf(&b, "  step:    %s (%s)\n", y.Step, y.State)
		fmt.Fprintf(&b, "  since:   %s (%s)\n", y.Since.UTC().Format(time.RFC3339), human(time.Duration(y.ForSeconds*float64(time.Second))))
	}
	if y.Error != "" {
		fmt.Fprintf(&b, "  error:   %s\n", y.Error)
	}
	for _, c := range y.Waiting {
		fmt.Fprintf(&b, "  waiting: %s: %s", c.Container, c.Reason)
		if c.Message != "" {
			fmt.Fprintf(&b, ": %s", c.Message)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// htmlRow is one step of the HTML waterfall.
type htmlRow struct {
	Name, Offset, Duration, Outcome, Error, Class string
	Left, Width                                   string
}

var page = template.Must(template.New("timeline").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Namespace}}/{{.Name}}: pod timeline</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.2em; }
p.meta { color: #555; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 8px; font-size: 0.9em; vertical-align: top; }
th { border-bottom: 1px solid #ccc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.track { width: 50%; }
div.lane { position: relative; height: 14px; background: #f3f3f3; }
div.bar { position: absolute; top: 0; height: 14px; min-width: 2px; }
.done div.bar { background: #3a7bd5; }
.failed div.bar { background: #d9534f; }
.inProgress div.bar { background: repeating-linear-gradient(45deg, #f0ad4e, #f0ad4e 4px, #f7d39b 4px, #f7d39b 8px); }
td.error { color: #b52b27; font-family: ui-monospace, monospace; font-size: 0.85em; }
</style>
</head>
<body>
<h1>Pod {{.Namespace}}/{{.Name}}</h1>
<p class="meta">uid {{.UID}} on node {{.Node}}: {{len .Rows}} steps in {{.Total}}{{if .Dropped}} ({{.Dropped}} steps between the start and the latest not kept){{end}}</p>
<table>
<tr><th>step</th><th>start</th><th></th><th>duration</th><th>outcome</th></tr>
{{range .Rows}}<tr class="{{.Class}}"><td>{{.Name}}</td><td class="num">+{{.Offset}}</td><td class="track"><div class="lane"><div class="bar" style="left: {{.Left}}; width: {{.Width}}"></div></div></td><td class="num">{{.Duration}}</td><td>{{.Outcome}}</td></tr>
{{if .Error}}<tr class="{{.Class}}"><td></td><td></td><td class="error" colspan="3">{{.Error}}</td></tr>
{{end}}{{end}}</table>
{{with .Status}}<p class="meta">Status: {{.Phase}}, ready {{.Ready}}{{range .Waiting}}; {{.Container}} waiting: {{.Reason}} {{.Message}}{{end}}</p>{{end}}
</body>
</html>
`))

// renderHTML writes the waterfall as a self-contained HTML page: inline
// CSS, no scripts, nothing fetched.
func renderHTML(w io.Writer, t timeline.Timeline, node string) error {
	rows, total := layout(t)
	data := struct {
		timeline.Timeline
		Node, Total string
		Rows        []htmlRow
	}{Timeline: t, Node: node, Total: human(total)}
	for _, r := range rows {
		data.Rows = append(data.Rows, htmlRow{
			Name: r.Name, Offset: human(r.offset), Duration: human(r.duration), Outcome: outcome(r.Step), Error: r.Error,
			Class: string(r.Outcome),
			Left:  fmt.Sprintf("%.3f%%", 100*r.from), Width: fmt.Sprintf("%.3f%%", 100*r.width),
		})
	}
	return page.Execute(w, data)
}
