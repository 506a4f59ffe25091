package node

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseLabels(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string
	}{
		{name: "empty", in: "", want: map[string]string{}},
		{name: "plain and allowed prefixes", in: "env=prod,node.kubernetes.io/pool=a,kubelet.kubernetes.io/x=y,topology.kubernetes.io/zone=z1",
			want: map[string]string{"env": "prod", "node.kubernetes.io/pool": "a", "kubelet.kubernetes.io/x": "y", "topology.kubernetes.io/zone": "z1"}},
		{name: "node role is refused", in: "node-role.kubernetes.io/worker=", wantErr: "node-role.kubernetes.io/worker"},
		{name: "k8s.io subdomain is refused", in: "foo.k8s.io/bar=1", wantErr: "foo.k8s.io/bar"},
		{name: "not key=value", in: "justakey", wantErr: "not key=value"},
		{name: "bad value", in: "a=b c", wantErr: "invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLabels(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestParseTaints(t *testing.T) {
	got, err := ParseTaints("dedicated=agent:NoSchedule,node-role.kubernetes.io/control-plane:NoSchedule")
	if err != nil {
		t.Fatal(err)
	}
	want := []v1.Taint{
		{Key: "dedicated", Value: "agent", Effect: v1.TaintEffectNoSchedule},
		{Key: "node-role.kubernetes.io/control-plane", Effect: v1.TaintEffectNoSchedule},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v", got)
	}
	for _, bad := range []string{"nokey", "a=b:Sometimes", "=x:NoSchedule"} {
		if _, err := ParseTaints(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestConditionTransitions(t *testing.T) {
	t0 := metav1.NewTime(testStart)
	t1 := metav1.NewTime(testStart.Add(10 * time.Second))
	other := v1.NodeCondition{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse, Reason: "RouteCreated"}

	first := conditions([]v1.NodeCondition{other}, nil, nil, t0)
	if len(first) != 5 || first[0] != other {
		t.Fatalf("conditions = %v, want the foreign one kept first plus four", first)
	}
	second := conditions(first, nil, nil, t1)
	for _, c := range second[1:] {
		if !c.LastTransitionTime.Equal(&t0) || !c.LastHeartbeatTime.Equal(&t1) {
			t.Errorf("%s: transition %v heartbeat %v", c.Type, c.LastTransitionTime, c.LastHeartbeatTime)
		}
	}
	third := conditions(second, errRuntimeDown, nil, t1)
	if r := third[4]; r.Type != v1.NodeReady || r.Status != v1.ConditionFalse || !r.LastTransitionTime.Equal(&t1) {
		t.Errorf("Ready = %+v", r)
	}
}

func TestRuntimeHealthMessages(t *testing.T) {
	h := runtimeHealth{downAfter: 30 * time.Second}
	if err := h.notReady(testStart); err == nil || err.Error() != "container runtime status check may not have completed yet" {
		t.Errorf("before the first check: %v", err)
	}
	rt := newFakeRuntime()
	rt.runtimeReady, rt.networkReady = false, false
	resp, _ := rt.Status(context.Background())
	h.observe(testStart, resp, nil)
	want := "[container runtime not ready: RuntimeReady=false reason: message:, container runtime network not ready: " +
		"NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized]"
	if err := h.notReady(testStart); err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestFailedHealthCheckMakesNodeNotReady(t *testing.T) {
	h := runtimeHealth{downAfter: 30 * time.Second}
	resp, _ := newFakeRuntime().Status(context.Background())
	h.observe(testStart, resp, nil)
	if err := h.notReady(testStart); err != nil {
		t.Fatalf("healthy runtime, no failed check: %v", err)
	}
	err := h.notReady(testStart, errors.New("PLEG is not healthy: pleg was last seen active 3m1s ago; threshold is 3m0s"))
	if err == nil || err.Error() != "PLEG is not healthy: pleg was last seen active 3m1s ago; threshold is 3m0s" {
		t.Errorf("notReady = %v, want the PLEG message", err)
	}
}
