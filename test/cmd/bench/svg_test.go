package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		hi   float64
		want []float64
	}{
		{1, []float64{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}},
		{250, []float64{0, 50, 100, 150, 200, 250}},
		{17.5, []float64{0, 5, 10, 15, 20}},
		{0.012, []float64{0, 0.005, 0.01, 0.015}},
		{3, []float64{0, 1, 2, 3}},
		{0, []float64{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}}, // nothing to show: 0 to 1
	} {
		if got := ticks(tc.hi); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ticks(%g) = %v, want %v", tc.hi, got, tc.want)
		}
	}
	if got := tickLabel(0.6000000000000001); got != "0.6" {
		t.Errorf("tick label %q, want 0.6", got)
	}
}

// svgElements parses doc as XML and counts its elements by name; it fails the test when doc
// is not well-formed.
func svgElements(t *testing.T, doc string) map[string]int {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	counts := map[string]int{}
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Space + " " + se.Name.Local
			}
			counts[se.Name.Local]++
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q, want svg in the SVG namespace", root)
	}
	return counts
}

// cdfRun is one pod count with two rounds of nodeagent (one pod never seen started), one
// of the kubelet and one of the floor.
func cdfRun() podsRun {
	return podsRun{Pods: 4, Results: map[string]sideResult{
		"nodeagent": {Rounds: []roundResult{
			{StartedSeconds: []float64{-1, 1.5, 2, 2.5}},
			{StartedSeconds: []float64{1, 1.2, 1.8, 3}},
		}},
		"kubelet": {Rounds: []roundResult{{StartedSeconds: []float64{2, 2.5, 3, 4}}}},
		"floor":   {Rounds: []roundResult{{StartedSeconds: []float64{0.5, 0.75, 1, 1.25}}}},
	}}
}

func TestCDFChart(t *testing.T) {
	c := cdfChart(cdfRun())
	if c == nil {
		t.Fatal("no chart")
	}
	var names []string
	for _, l := range c.lines {
		names = append(names, l.name)
	}
	if !reflect.DeepEqual(names, []string{"nodeagent", "kubelet", "floor"}) {
		t.Fatalf("lines %v", names)
	}
	// nodeagent: 7 of 8 pods seen started, each an eighth.
	na := c.lines[0].points
	if len(na) != 7 || na[0] != (point{1, 0.125}) || na[6] != (point{3, 0.875}) {
		t.Errorf("nodeagent's points %v, want 7 from (1, 1/8) to (3, 7/8)", na)
	}
	if kl := c.lines[1].points; kl[3] != (point{4, 1}) {
		t.Errorf("kubelet's points %v, want the last at (4, 1)", kl)
	}
	if cdfChart(podsRun{Pods: 4, Results: map[string]sideResult{"nodeagent": {}}}) != nil {
		t.Error("a chart without a start")
	}
}

func TestWriteSVG(t *testing.T) {
	for _, tc := range []struct {
		name   string
		title  string
		charts []chart
		// want are counts of elements: a polyline per line, a circle per marked point.
		want map[string]int
	}{
		{
			name: "start CDF", title: "Pod start latency: nodeagent, kubelet & floor <N=4>",
			charts: []chart{*cdfChart(cdfRun())},
			want:   map[string]int{"svg": 1, "polyline": 3, "circle": 0},
		},
		{
			name: "scaling", title: "Agent CPU per pod as N grows",
			charts: scalingCharts(scalingCurves(scaleRuns(), 30*time.Second)),
			// started: 3 + 3 points; idle: 3 + 2 (the kubelet's at 250 missing).
			want: map[string]int{"svg": 1, "polyline": 4, "circle": 11},
		},
		{
			name: "empty chart", title: "nothing",
			charts: []chart{{title: "no data", xLabel: "x", yLabel: "y"}},
			want:   map[string]int{"svg": 1, "polyline": 0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "plot.svg")
			if err := writePlot(path, tc.title, tc.charts); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			doc := string(data)
			counts := svgElements(t, doc)
			for el, n := range tc.want {
				if counts[el] != n {
					t.Errorf("%d <%s>, want %d", counts[el], el, n)
				}
			}
			for _, c := range tc.charts {
				for _, l := range c.lines {
					if !strings.Contains(doc, ">"+esc(l.name)+"</text>") {
						t.Errorf("no legend entry for %s", l.name)
					}
					if !strings.Contains(doc, `stroke="`+colourOf(l.name, 0)+`"`) {
						t.Errorf("no line in %s's colour", l.name)
					}
				}
				if !strings.Contains(doc, esc(c.xLabel)) || !strings.Contains(doc, esc(c.yLabel)) {
					t.Errorf("axis labels %q, %q missing", c.xLabel, c.yLabel)
				}
			}
			if !strings.Contains(doc, esc(tc.title)) {
				t.Errorf("title %q missing", tc.title)
			}
		})
	}
}
