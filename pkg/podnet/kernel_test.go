package podnet

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
)

// inNewNetns runs f on a thread of its own in a network namespace made
// for the test: routes, links, iptables rules and forwarding sysctls are
// the namespace's, so the machine's are never touched. The thread is never
// unlocked, so it ends with f and the namespace with it.
func inNewNetns(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		f()
	}()
	<-done
}

// vethLink makes an up veth pair (the dummy driver is not everywhere) and
// gives name the addresses.
func vethLink(t *testing.T, name string, addrs ...string) {
	t.Helper()
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
	if err := netlink.LinkAdd(link); err != nil {
		t.Errorf("add %s: %v", name, err)
		return
	}
	for _, a := range addrs {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			t.Errorf("%s: %v", a, err)
			return
		}
		addr.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Errorf("address %s: %v", a, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		t.Errorf("up %s: %v", name, err)
	}
	if peer, err := netlink.LinkByName(name + "p"); err != nil || netlink.LinkSetUp(peer) != nil {
		t.Errorf("up the peer of %s: %v", name, err)
	}
}

// kernelRoutes lists the namespace's main table as "dst via gw proto N".
func kernelRoutes(t *testing.T) []string {
	t.Helper()
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Errorf("list routes: %v", err)
	}
	var out []string
	for _, r := range routes {
		if r.Dst == nil || r.Gw == nil {
			continue // the connected routes of the addresses
		}
		out = append(out, r.Dst.String()+" via "+r.Gw.String()+" proto "+r.Protocol.String())
	}
	slices.Sort(out)
	return out
}

func TestRealKernelRoutes(t *testing.T) {
	inNewNetns(t, func() {
		_, ctx := ktesting.NewTestContext(t)
		vethLink(t, "pn-test0", "192.168.77.1/24", "fd00:77::1/64")
		// Someone else's route, which the agent must leave alone.
		_, foreign, _ := net.ParseCIDR("10.99.0.0/24")
		if err := netlink.RouteAdd(&netlink.Route{Dst: foreign, Gw: net.ParseIP("192.168.77.99"), Protocol: unix.RTPROT_STATIC}); err != nil {
			t.Errorf("foreign route: %v", err)
			return
		}
		table := HostKernel{}.Routes()
		check := func(step string, want ...string) {
			t.Helper()
			got := kernelRoutes(t)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s: routes =\n  %s\nwant\n  %s", step, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		}
		foreignLine := "10.99.0.0/24 via 192.168.77.99 proto static"

		want := []Route{route("10.244.1.0/24", "192.168.77.2"), route("fd00:10:244:1::/64", "fd00:77::2")}
		if err := syncRoutes(ctx, table, want); err != nil {
			t.Errorf("add: %v", err)
		}
		// netlink has no name for protocol 157.
		check("added", "10.244.1.0/24 via 192.168.77.2 proto 157", foreignLine, "fd00:10:244:1::/64 via fd00:77::2 proto 157")

		want[0] = route("10.244.1.0/24", "192.168.77.3")
		if err := syncRoutes(ctx, table, want); err != nil {
			t.Errorf("change: %v", err)
		}
		check("changed", "10.244.1.0/24 via 192.168.77.3 proto 157", foreignLine, "fd00:10:244:1::/64 via fd00:77::2 proto 157")

		// A route to the foreign destination is not taken over.
		if err := syncRoutes(ctx, table, append(want, route("10.99.0.0/24", "192.168.77.4"))); err != nil {
			t.Errorf("conflict: %v", err)
		}
		check("conflict", "10.244.1.0/24 via 192.168.77.3 proto 157", foreignLine, "fd00:10:244:1::/64 via fd00:77::2 proto 157")

		if err := syncRoutes(ctx, table, want[1:]); err != nil {
			t.Errorf("remove: %v", err)
		}
		check("removed", foreignLine, "fd00:10:244:1::/64 via fd00:77::2 proto 157")

		// Gone already: deleting again is no error.
		if err := table.Delete(want[0]); err != nil {
			t.Errorf("delete a missing route: %v", err)
		}
		if err := table.DeleteAllOurs(); err != nil {
			t.Errorf("delete all: %v", err)
		}
		check("all of ours removed", foreignLine)
	})
}

func iptablesSave(t *testing.T, cmd string) string {
	t.Helper()
	out, err := exec.Command(cmd + "-save").CombinedOutput()
	if err != nil {
		t.Errorf("%s-save: %v: %s", cmd, err, out)
	}
	return string(out)
}

func TestRealKernelRulesForwardingAndRemoval(t *testing.T) {
	for _, tool := range []string{"iptables", "ip6tables", "iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	inNewNetns(t, func() {
		_, ctx := ktesting.NewTestContext(t)
		kernel := HostKernel{}
		vethLink(t, "pn-test0", "192.168.77.1/24")
		cluster, _ := ParseClusterCIDRs("10.244.0.0/16,fd00:10:244::/56")
		podCIDRs, _ := ParsePodCIDRs([]string{"10.244.1.0/24", "fd00:10:244:1::/64"})
		rules := desiredRules(podCIDRs, cluster)

		m := &Manager{cfg: Config{Kernel: kernel}}
		for range 2 { // idempotent
			if err := m.syncRules(ctx, rules, nil); err != nil {
				t.Errorf("add rules: %v", err)
				return
			}
		}
		v4, v6 := iptablesSave(t, "iptables"), iptablesSave(t, "ip6tables")
		masq4 := `-A POSTROUTING -s 10.244.1.0/24 ! -d 10.244.0.0/16 -m comment --comment "` + masqueradeComment + `" -j MASQUERADE`
		masq6 := `-A POSTROUTING -s fd00:10:244:1::/64 ! -d fd00:10:244::/56 -m comment --comment "` + masqueradeComment + `" -j MASQUERADE`
		if strings.Count(v4, masq4) != 1 || strings.Count(v4, "nodeagent:") != 3 {
			t.Errorf("iptables-save:\n%s\nwant once: %s", v4, masq4)
		}
		if strings.Count(v6, masq6) != 1 || strings.Count(v6, "nodeagent:") != 3 {
			t.Errorf("ip6tables-save:\n%s\nwant once: %s", v6, masq6)
		}

		for _, v6 := range []bool{false, true} {
			if err := kernel.EnableForwarding(v6); err != nil {
				t.Errorf("forwarding: %v", err)
			}
		}
		for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
			if b, err := os.ReadFile(filepath.Join("/proc/sys", key)); err != nil || strings.TrimSpace(string(b)) != "1" {
				t.Errorf("%s = %q, %v", key, b, err)
			}
		}

		// Everything recorded, then removed as an agent with the setting off does.
		root, conf := t.TempDir(), t.TempDir()
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "pn-br0"}}
		if err := netlink.LinkAdd(br); err != nil {
			t.Errorf("bridge: %v", err)
		}
		if err := (netlinkRoutes{}).Replace(route("10.244.2.0/24", "192.168.77.2")); err != nil {
			t.Errorf("route: %v", err)
		}
		list, _ := Conflist(ConflistConfig{Bridge: "pn-br0", PodCIDRs: podCIDRs})
		if err := writeFileAtomic(filepath.Join(conf, ConflistName), list, 0o644); err != nil {
			t.Errorf("conflist: %v", err)
		}
		st := &state{Conflist: filepath.Join(conf, ConflistName), Bridge: "pn-br0", RouteProtocol: RouteProtocol, Rules: rules}
		if err := writeState(filepath.Join(root, StateFileName), st); err != nil {
			t.Errorf("state: %v", err)
		}
		// A rule of someone else's with a comment much like ours.
		other := []string{"-s", "10.1.0.0/16", "-m", "comment", "--comment", "nodeagent-pods: not ours", "-j", "MASQUERADE"}
		if out, err := exec.Command("iptables", append([]string{"-t", "nat", "-A", "POSTROUTING"}, other...)...).CombinedOutput(); err != nil {
			t.Errorf("foreign rule: %v %s", err, out)
		}

		if err := Remove(ctx, root, kernel); err != nil {
			t.Errorf("remove: %v", err)
		}
		v4, v6 = iptablesSave(t, "iptables"), iptablesSave(t, "ip6tables")
		if strings.Contains(v4, "nodeagent:") || strings.Contains(v6, "nodeagent:") {
			t.Errorf("rules left:\n%s\n%s", v4, v6)
		}
		if !strings.Contains(v4, "nodeagent-pods: not ours") {
			t.Errorf("someone else's rule removed:\n%s", v4)
		}
		if _, err := netlink.LinkByName("pn-br0"); err == nil {
			t.Error("bridge left")
		}
		if _, err := netlink.LinkByName("pn-test0"); err != nil {
			t.Errorf("a device that is not a bridge went: %v", err)
		}
		if got := kernelRoutes(t); len(got) != 0 {
			t.Errorf("routes left: %v", got)
		}
		for _, p := range []string{st.Conflist, filepath.Join(root, StateFileName)} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s left (%v)", p, err)
			}
		}
	})
}
