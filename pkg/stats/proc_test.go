package stats

import (
	"strconv"
	"testing"
	"time"
)

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

func TestProc(t *testing.T) {
	p := procFS{root: fakeProc(t)}
	ifaces, err := p.netDev("self")
	if err != nil {
		t.Fatal(err)
	}
	if len(ifaces) != 4 || ifaces[1] != (interfaceCounters{name: "eth0", rxBytes: 1000, rxPackets: 17393, rxErrors: 2, txBytes: 2000, txPackets: 14484, txErrs: 3}) {
		t.Errorf("net/dev = %+v", ifaces)
	}
	if got := p.defaultRouteInterface("self"); got != "eth0" {
		t.Errorf("default route interface = %q, want eth0", got)
	}
	if bt, err := p.bootTime(); err != nil || !bt.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("boot time = %v, %v", bt, err)
	}
	if n, err := p.maxPID(); err != nil || n != 120000 {
		t.Errorf("max pid = %d, %v; want threads-max 120000, the smaller", n, err)
	}
	if got := p.cgroupOf("self", false); got != "/system.slice/nodeagent.service" {
		t.Errorf("v1 cgroup of self = %q", got)
	}
	if got := p.cgroupOf("42", true); got != "/system.slice/containerd.service" {
		t.Errorf("v2 cgroup of 42 = %q", got)
	}
	if got := p.cgroupOf("7", true); got != "" {
		t.Errorf("cgroup of a missing process = %q, want empty", got)
	}
}

func TestCPURates(t *testing.T) {
	r := newCPURates(time.Second, time.Minute)
	t0 := time.Unix(1000, 0)
	if v := r.observe("k", t0, 1_000_000_000); v != nil {
		t.Fatalf("first reading gave a rate %d", *v)
	}
	// Too soon for a rate.
	if v := r.observe("k", t0.Add(100*time.Millisecond), 1_050_000_000); v != nil {
		t.Fatalf("reading 100ms later gave a rate %d", *v)
	}
	// Two seconds, one core-second: half a core.
	v := r.observe("k", t0.Add(2*time.Second), 2_000_000_000)
	if v == nil || *v != 500_000_000 {
		t.Fatalf("rate = %v, want 500000000", v)
	}
	// Soon after: the last rate stands.
	if v := r.observe("k", t0.Add(2100*time.Millisecond), 2_100_000_000); v == nil || *v != 500_000_000 {
		t.Fatalf("rate soon after = %v, want the last one", v)
	}
	// A counter that went back is a new cgroup: no rate until a new baseline ages.
	if v := r.observe("k", t0.Add(5*time.Second), 10); v != nil {
		t.Fatalf("rate after a reset = %d", *v)
	}
	r.forget(t0.Add(2 * time.Minute))
	if len(r.state) != 0 {
		t.Errorf("state kept after forgetAfter: %v", r.state)
	}
}
