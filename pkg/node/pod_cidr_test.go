package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestNextPodCIDR(t *testing.T) {
	tests := []struct {
		name      string
		podCIDR   string
		sent      string
		want      string
		wantError bool
	}{
		{name: "not assigned yet", podCIDR: "", want: ""},
		{name: "assigned", podCIDR: "10.244.1.0/24", want: "10.244.1.0/24"},
		{name: "already handed over", podCIDR: "10.244.1.0/24", sent: "10.244.1.0/24", want: ""},
		{name: "changed", podCIDR: "10.244.2.0/24", sent: "10.244.1.0/24", want: "10.244.2.0/24"},
		{name: "IPv6", podCIDR: "fd00:10:244::/64", want: "fd00:10:244::/64"},
		{name: "invalid", podCIDR: "10.244.1.0", wantError: true},
		{name: "invalid after a valid one", podCIDR: "banana", sent: "10.244.1.0/24", wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &v1.Node{Spec: v1.NodeSpec{PodCIDR: tt.podCIDR}}
			got, err := nextPodCIDR(n, tt.sent)
			if (err != nil) != tt.wantError {
				t.Fatalf("nextPodCIDR = %q, %v; want error %v", got, err, tt.wantError)
			}
			if got != tt.want {
				t.Errorf("nextPodCIDR = %q, want %q", got, tt.want)
			}
		})
	}
}

// setPodCIDR creates the Node, or sets its spec.podCIDR.
func (e *testEnv) setPodCIDR(t *testing.T, cidr string) {
	t.Helper()
	ctx := context.Background()
	nodes := e.client.CoreV1().Nodes()
	n, err := nodes.Get(ctx, "nodeagent-node", metav1.GetOptions{})
	if err != nil {
		n = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nodeagent-node"}, Spec: v1.NodeSpec{PodCIDR: cidr}}
		if _, err := nodes.Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	n.Spec.PodCIDR = cidr
	if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A scenario, one poll per step: the CIDR reaches the runtime once it is
// assigned, once per value, again after a failed hand-over, and never
// when it does not parse.
func TestPodCIDRSync(t *testing.T) {
	e := newTestEnv(t, nil)
	ctx := context.Background()
	steps := []struct {
		name    string
		do      func()
		wantAll []string // every CIDR the runtime accepted so far
	}{
		{name: "no node", wantAll: nil},
		{name: "node without a pod CIDR", do: func() { e.setPodCIDR(t, "") }, wantAll: nil},
		{name: "assigned", do: func() { e.setPodCIDR(t, "10.244.1.0/24") }, wantAll: []string{"10.244.1.0/24"}},
		{name: "unchanged", wantAll: []string{"10.244.1.0/24"}},
		{name: "runtime refuses the change", do: func() {
			e.setPodCIDR(t, "10.244.2.0/24")
			e.rt.set(func(f *fakeRuntime) { f.configErr = errors.New("unimplemented") })
		}, wantAll: []string{"10.244.1.0/24"}},
		{name: "runtime accepts it at the next poll", do: func() {
			e.rt.set(func(f *fakeRuntime) { f.configErr = nil })
		}, wantAll: []string{"10.244.1.0/24", "10.244.2.0/24"}},
		{name: "invalid", do: func() { e.setPodCIDR(t, "10.244.3.0") }, wantAll: []string{"10.244.1.0/24", "10.244.2.0/24"}},
		{name: "back to the one handed over", do: func() { e.setPodCIDR(t, "10.244.2.0/24") }, wantAll: []string{"10.244.1.0/24", "10.244.2.0/24"}},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		e.ctrl.podCIDR.sync(ctx)
		if got := e.rt.sentPodCIDRs(); !slices.Equal(got, s.wantAll) {
			t.Fatalf("%s: runtime got pod CIDRs %v, want %v", s.name, got, s.wantAll)
		}
	}
}

// signalingRuntime tells the test of every pod CIDR the runtime accepted.
type signalingRuntime struct {
	*fakeRuntime
	accepted chan string
}

func (s signalingRuntime) UpdateRuntimeConfig(ctx context.Context, cfg *runtimeapi.RuntimeConfig) error {
	if err := s.fakeRuntime.UpdateRuntimeConfig(ctx, cfg); err != nil {
		return err
	}
	s.accepted <- cfg.GetNetworkConfig().GetPodCidr()
	return nil
}

// Run polls for the pod CIDR on the controller's clock, alongside
// registration, and stops with its context.
func TestRunHandsPodCIDRToRuntime(t *testing.T) {
	accepted := make(chan string, 4)
	e := newTestEnv(t, func(c *Config) {
		c.Runtime = signalingRuntime{fakeRuntime: c.Runtime.(*fakeRuntime), accepted: accepted}
		c.PodCIDRPollPeriod = time.Minute
	})
	e.setPodCIDR(t, "10.244.1.0/24")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.ctrl.Run(ctx) }()
	if got := <-accepted; got != "10.244.1.0/24" {
		t.Fatalf("runtime got %q", got)
	}

	// The next poll comes a period later, on the injected clock.
	e.setPodCIDR(t, "10.244.2.0/24")
	for {
		e.clock.Step(time.Minute)
		select {
		case got := <-accepted:
			if got != "10.244.2.0/24" {
				t.Fatalf("runtime got %q after the change", got)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run = %v", err)
			}
			return
		case <-time.After(10 * time.Millisecond):
			// The poll may not have waited on the clock yet; step again.
		}
	}
}
