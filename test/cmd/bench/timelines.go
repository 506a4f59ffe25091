package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/pkg/timeline"
	"github.com/nodeagent/nodeagent/test/harness"
)

// timelineFetches bounds the timelines asked for at once: enough to read 100 in a second or
// two, few enough not to stand out in the agent's CPU.
const timelineFetches = 8

// timelineSteps reads the timeline of each of the round's pods from the agent and divides
// their starts (breakdown), with the creation and start times the watch saw. A pod whose
// timeline cannot be had counts as missing; the bench goes on, and says why on stderr.
func timelineSteps(ctx context.Context, cs kubernetes.Interface, times map[string]*podTimes) *startSteps {
	names := make([]string, 0, len(times))
	for name := range times {
		names = append(names, name)
	}
	sort.Strings(names)
	got, err := fetchTimelines(ctx, cs, names)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %d of %d timelines: %v\n", len(names)-len(got), len(names), err)
	}
	pods := make([]podStart, 0, len(names))
	for _, name := range names {
		t, ok := got[name]
		if !ok {
			pods = append(pods, podStart{})
			continue
		}
		pt := times[name]
		pods = append(pods, podStart{created: pt.created, started: pt.started, steps: t.Steps})
	}
	return breakdown(pods)
}

// fetchTimelines asks the agent of the bench's node, through the apiserver's node proxy
// (/api/v1/nodes/<node>/proxy/debug/pods/<ns>/<name>/timeline, as kubectl-nodeagent does), for
// the timeline of each named pod of the bench namespace, timelineFetches at a time. It returns
// those it had, and the first error of the others.
func fetchTimelines(ctx context.Context, cs kubernetes.Interface, names []string) (map[string]timeline.Timeline, error) {
	var mu sync.Mutex
	out := make(map[string]timeline.Timeline, len(names))
	var firstErr error
	var g errgroup.Group
	g.SetLimit(timelineFetches)
	for _, name := range names {
		g.Go(func() error {
			t, err := fetchTimeline(ctx, cs, name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return nil // the others are still worth having
			}
			out[name] = t
			return nil
		})
	}
	_ = g.Wait()
	return out, firstErr
}

func fetchTimeline(ctx context.Context, cs kubernetes.Interface, name string) (timeline.Timeline, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var t timeline.Timeline
	raw, err := cs.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/nodes", harness.NodeName, "proxy", "debug", "pods", benchNamespace, name, "timeline").
		DoRaw(ctx)
	if err != nil {
		return t, fmt.Errorf("timeline of %s/%s: %w", benchNamespace, name, err)
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return t, fmt.Errorf("timeline of %s/%s: %w", benchNamespace, name, err)
	}
	return t, nil
}
