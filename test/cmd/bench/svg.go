package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// A small line chart written as SVG by hand: linear axes from zero with ticks and labels,
// one polyline per line, a legend below. Enough for the bench's plots, no dependency.

// chart is one panel of a plot.
type chart struct {
	title, xLabel, yLabel string
	lines                 []line
	// yMax, when set, is the top of the y axis (a CDF's 1); else it follows the data.
	yMax float64
	// steps draws each line as a step function (a CDF: the fraction holds until the next
	// point), markers marks each point.
	steps, markers bool
}

// line is one series of a chart.
type line struct {
	name, colour string
	points       []point
}

type point struct{ x, y float64 }

// The geometry of a panel, in pixels.
const (
	panelW      = 560
	panelH      = 400
	marginLeft  = 72
	marginRight = 24
	marginTop   = 44
	marginBelow = 96 // tick labels, the axis label and the legend
	titleH      = 32
)

// sideColours are the sides' colours, the same in every plot.
var sideColours = map[string]string{
	"nodeagent": "#1f77b4",
	"kubelet":   "#d62728",
	"floor":     "#7f7f7f",
}

// otherColours are the colours of lines that are no side, in turn.
var otherColours = []string{"#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

func colourOf(name string, i int) string {
	if c, ok := sideColours[name]; ok {
		return c
	}
	return otherColours[i%len(otherColours)]
}

// writeSVG writes the charts side by side under title as one SVG document.
func writeSVG(w io.Writer, title string, charts []chart) error {
	width, height := panelW*max(len(charts), 1), panelH+titleH
	var b strings.Builder
	fmt.Fprintf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n", width, height, width, height)
	fmt.Fprintf(&b, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", width, height)
	fmt.Fprintf(&b, "<text x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"16\">%s</text>\n", width/2, esc(title))
	for i, c := range charts {
		writePanel(&b, c, float64(i*panelW), titleH)
	}
	fmt.Fprintln(&b, "</svg>")
	_, err := io.WriteString(w, b.String())
	return err
}

// writePanel draws one chart with its top left corner at (x0, y0).
func writePanel(b *strings.Builder, c chart, x0, y0 float64) {
	left, top := x0+marginLeft, y0+marginTop
	w, h := float64(panelW-marginLeft-marginRight), float64(panelH-marginTop-marginBelow)
	var xMax, yMax float64
	for _, l := range c.lines {
		for _, p := range l.points {
			xMax, yMax = max(xMax, p.x), max(yMax, p.y)
		}
	}
	if c.yMax > 0 {
		yMax = c.yMax
	}
	xTicks, yTicks := ticks(xMax), ticks(yMax)
	xTop, yTop := xTicks[len(xTicks)-1], yTicks[len(yTicks)-1]
	sx := func(x float64) float64 { return left + w*x/xTop }
	sy := func(y float64) float64 { return top + h - h*y/yTop }

	fmt.Fprintf(b, "<g>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n", left+w/2, y0+24, esc(c.title))
	for _, t := range xTicks {
		x := sx(t)
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", x, top, x, top+h)
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", x, top+h, x, top+h+5)
		fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, top+h+18, tickLabel(t))
	}
	for _, t := range yTicks {
		y := sy(t)
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", left, y, left+w, y)
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", left-5, y, left, y)
		fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", left-8, y+4, tickLabel(t))
	}
	fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", left, top+h, left+w, top+h)
	fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", left, top, left, top+h)
	fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", left+w/2, top+h+38, esc(c.xLabel))
	fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
		x0+16, top+h/2, x0+16, top+h/2, esc(c.yLabel))

	for i, l := range c.lines {
		colour := l.colour
		if colour == "" {
			colour = colourOf(l.name, i)
		}
		var pts []string
		for j, p := range l.points {
			if c.steps {
				prev := 0.0
				if j > 0 {
					prev = l.points[j-1].y
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", sx(p.x), sy(prev)))
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", sx(p.x), sy(p.y)))
		}
		if len(pts) > 0 {
			fmt.Fprintf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>\n", colour, strings.Join(pts, " "))
		}
		if c.markers {
			for _, p := range l.points {
				fmt.Fprintf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", sx(p.x), sy(p.y), colour)
			}
		}
		// The legend: one entry per line, in a row below the x axis's label.
		lx, ly := left+float64(i)*150, top+h+64
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>\n", lx, ly, lx+24, ly, colour)
		fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx+30, ly+4, esc(l.name))
	}
	fmt.Fprintln(b, "</g>")
}

// ticks are the axis's ticks from 0 to the first round step at or above hi: 1, 2 or 5
// times a power of ten, some 5 of them. An empty axis is 0 to 1.
func ticks(hi float64) []float64 {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		hi = 1
	}
	raw := hi / 5
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := pow * 10
	for _, m := range []float64{1, 2, 5} {
		if m*pow >= raw {
			step = m * pow
			break
		}
	}
	n := int(math.Ceil(hi/step - 1e-9))
	out := make([]float64, 0, n+1)
	for i := 0; i <= n; i++ {
		out = append(out, float64(i)*step)
	}
	return out
}

// tickLabel writes a tick's value short: 0.30000000000000004 as 0.3.
func tickLabel(v float64) string {
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
