package node

import (
	"context"
	"fmt"
	gosync "sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestConditionEvents(t *testing.T) {
	cond := func(typ v1.NodeConditionType, s v1.ConditionStatus) v1.NodeCondition {
		return v1.NodeCondition{Type: typ, Status: s}
	}
	calm := []v1.NodeCondition{cond(v1.NodeMemoryPressure, v1.ConditionFalse), cond(v1.NodeDiskPressure, v1.ConditionFalse),
		cond(v1.NodePIDPressure, v1.ConditionFalse), cond(v1.NodeReady, v1.ConditionTrue)}
	with := func(cs []v1.NodeCondition, c v1.NodeCondition) []v1.NodeCondition {
		out := append([]v1.NodeCondition(nil), cs...)
		for i := range out {
			if out[i].Type == c.Type {
				out[i] = c
			}
		}
		return out
	}
	pressed := with(with(with(calm, cond(v1.NodeMemoryPressure, v1.ConditionTrue)), cond(v1.NodeDiskPressure, v1.ConditionTrue)),
		cond(v1.NodePIDPressure, v1.ConditionTrue))
	tests := []struct {
		name       string
		prev, next []v1.NodeCondition
		want       string
	}{
		{name: "a new node: its pressure conditions, not Ready", next: calm,
			want: "[NodeHasSufficientMemory NodeHasNoDiskPressure NodeHasSufficientPID]"},
		{name: "nothing turned", prev: calm, next: calm, want: "[]"},
		{name: "every pressure", prev: calm, next: pressed,
			want: "[NodeHasInsufficientMemory NodeHasDiskPressure NodeHasInsufficientPID]"},
		{name: "pressure gone", prev: pressed, next: calm,
			want: "[NodeHasSufficientMemory NodeHasNoDiskPressure NodeHasSufficientPID]"},
		{name: "disk only", prev: calm, next: with(calm, cond(v1.NodeDiskPressure, v1.ConditionTrue)), want: "[NodeHasDiskPressure]"},
		{name: "not ready", prev: calm, next: with(calm, cond(v1.NodeReady, v1.ConditionFalse)), want: "[NodeNotReady]"},
		{name: "ready again", prev: with(calm, cond(v1.NodeReady, v1.ConditionFalse)), next: calm, want: "[NodeReady]"},
		{name: "back from Unknown (the node controller's, while the agent was away)",
			prev: []v1.NodeCondition{cond(v1.NodeMemoryPressure, v1.ConditionUnknown), cond(v1.NodeDiskPressure, v1.ConditionUnknown),
				cond(v1.NodePIDPressure, v1.ConditionUnknown), cond(v1.NodeReady, v1.ConditionUnknown)},
			next: calm, want: "[NodeHasSufficientMemory NodeHasNoDiskPressure NodeHasSufficientPID NodeReady]"},
		{name: "others' conditions say nothing", prev: calm,
			next: append(with(calm, cond(v1.NodeMemoryPressure, v1.ConditionFalse)), cond(v1.NodeNetworkUnavailable, v1.ConditionTrue)), want: "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fmt.Sprint(conditionEvents(tt.prev, tt.next)); got != tt.want {
				t.Errorf("events = %s, want %s", got, tt.want)
			}
		})
	}
}

// fakeRecorder records events as "<kind>/<name> <type> <reason>: <message>".
type fakeRecorder struct {
	mu     gosync.Mutex
	events []string
}

func (r *fakeRecorder) Eventf(o runtime.Object, typ, reason, format string, args ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := o.(*v1.ObjectReference)
	r.events = append(r.events, fmt.Sprintf("%s/%s %s %s: %s", ref.Kind, ref.Name, typ, reason, fmt.Sprintf(format, args...)))
}

func (r *fakeRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// settablePressure is a Pressure the test sets.
type settablePressure struct{ conds []v1.NodeConditionType }

func (p *settablePressure) Conditions() []v1.NodeConditionType { return p.conds }

func TestNodeEventsOnRegistrationAndPressure(t *testing.T) {
	rec, pressure := &fakeRecorder{}, &settablePressure{}
	e := newTestEnv(t, func(c *Config) { c.Recorder, c.Pressure = rec, pressure })
	ctx := context.Background()
	sync := func() {
		t.Helper()
		if err := e.ctrl.sync(ctx); err != nil {
			t.Fatal(err)
		}
		e.clock.Step(10 * time.Second)
	}
	msg := func(reason string) string {
		return "Node/nodeagent-node Normal " + reason + ": Node nodeagent-node status is now: " + reason
	}
	check := func(step string, want ...string) {
		t.Helper()
		if got := rec.take(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: events = %q, want %q", step, got, want)
		}
	}

	sync()
	check("registration", msg("NodeHasSufficientMemory"), msg("NodeHasNoDiskPressure"), msg("NodeHasSufficientPID"))
	sync()
	check("steady")
	pressure.conds = []v1.NodeConditionType{v1.NodeDiskPressure}
	sync()
	check("disk pressure", msg("NodeHasDiskPressure"))
	if c := condition(e.node(t), v1.NodeDiskPressure); c.Status != v1.ConditionTrue {
		t.Errorf("DiskPressure = %+v", c)
	}
	pressure.conds = nil
	sync()
	check("relieved", msg("NodeHasNoDiskPressure"))

	// The agent restarts after the node controller marked the conditions
	// Unknown: registration announces the pressure conditions again, and
	// Ready coming back.
	n := e.node(t)
	for i := range n.Status.Conditions {
		n.Status.Conditions[i].Status = v1.ConditionUnknown
	}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	restarted, err := New(e.ctrl.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.ctrl = restarted
	sync()
	check("restart", msg("NodeHasSufficientMemory"), msg("NodeHasNoDiskPressure"), msg("NodeHasSufficientPID"), msg("NodeReady"))
}
