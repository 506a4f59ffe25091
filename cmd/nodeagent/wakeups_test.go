package main

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// recordingWaker records the wake-ups it was given.
type recordingWaker struct{ got []string }

func (r *recordingWaker) Wake(ref runtime.PodRef) { r.got = append(r.got, "Wake "+string(ref.UID)) }
func (r *recordingWaker) WakePod(uid types.UID)   { r.got = append(r.got, "WakePod "+string(uid)) }

func TestPodWakeups(t *testing.T) {
	tests := []struct {
		name  string
		bound bool
		want  []string
	}{
		// Before bind there is nothing to wake: dropped, not a nil dereference.
		{name: "unbound", bound: false, want: nil},
		{name: "bound", bound: true, want: []string{"Wake a", "WakePod b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w podWakeups
			r := &recordingWaker{}
			if tt.bound {
				w.bind(r)
			}
			w.wake(runtime.PodRef{UID: "a"})
			w.wakePod("b")
			if !slices.Equal(r.got, tt.want) {
				t.Errorf("delivered %v, want %v", r.got, tt.want)
			}
		})
	}
}

// The funcs handed to the PLEG and the prober at construction reach the
// dispatcher bound later.
func TestPodWakeupsBoundAfterHandingOut(t *testing.T) {
	var w podWakeups
	onRuntimeChange, onProbeChange := w.wake, w.wakePod
	onRuntimeChange(runtime.PodRef{UID: "early"})
	r := &recordingWaker{}
	w.bind(r)
	onRuntimeChange(runtime.PodRef{UID: "a"})
	onProbeChange("b")
	if want := []string{"Wake a", "WakePod b"}; !slices.Equal(r.got, want) {
		t.Errorf("delivered %v, want %v", r.got, want)
	}
}
