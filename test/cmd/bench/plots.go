package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The bench's plots, written beside the JSON results under the same time-stamped name.

// cdfChart is the start-latency CDF of one pod count: for each side, the fraction of all
// pods of all rounds whose containers were seen started within x seconds of their creation
// (a pod never seen started counts in the whole, never in the fraction). nil when no side
// has a start.
func cdfChart(run podsRun) *chart {
	c := &chart{
		title:  fmt.Sprintf("creation → containers started, %d pods at once (all pods of all rounds)", run.Pods),
		xLabel: "seconds from the pod's creation to its containers started",
		yLabel: "fraction of pods",
		yMax:   1, steps: true,
	}
	for _, side := range []string{"nodeagent", "kubelet", "floor"} {
		s, ok := run.Results[side]
		if !ok {
			continue
		}
		var started []float64
		total := 0
		for _, r := range s.Rounds {
			total += len(r.StartedSeconds)
			for _, v := range r.StartedSeconds {
				if v >= 0 {
					started = append(started, v)
				}
			}
		}
		if len(started) == 0 {
			continue
		}
		sort.Float64s(started)
		l := line{name: side}
		for i, v := range started {
			l.points = append(l.points, point{v, float64(i+1) / float64(total)})
		}
		c.lines = append(c.lines, l)
	}
	if len(c.lines) == 0 {
		return nil
	}
	return c
}

// scalingCharts are the agents' costs per pod against the pod count: per pod started, and
// per pod-minute with the pods idle. nil when no agent has a figure.
func scalingCharts(curves []scalingCurve) []chart {
	started := chart{title: "agent CPU per pod started", xLabel: "pods started at once (N)", yLabel: "agent CPU s per pod, first create → all running", markers: true}
	idle := chart{title: "agent CPU per pod-minute, N pods idle", xLabel: "pods running (N)", yLabel: "agent CPU s per pod and minute", markers: true}
	for _, c := range curves {
		ls, li := line{name: c.Side}, line{name: c.Side}
		for _, p := range c.Points {
			if p.PerPodStarted != nil {
				ls.points = append(ls.points, point{float64(p.Pods), *p.PerPodStarted})
			}
			if p.PerPodMinuteIdle != nil {
				li.points = append(li.points, point{float64(p.Pods), *p.PerPodMinuteIdle})
			}
		}
		if len(ls.points) > 0 {
			started.lines = append(started.lines, ls)
		}
		if len(li.points) > 0 {
			idle.lines = append(idle.lines, li)
		}
	}
	var out []chart
	for _, c := range []chart{started, idle} {
		if len(c.lines) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// writePlot writes charts as one SVG file at path.
func writePlot(path, title string, charts []chart) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	if err := writeSVG(&b, title, charts); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: plot in %s\n", path)
	return nil
}
