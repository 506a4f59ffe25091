package podnet

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteTable is the main routing table as the route reconciler sees it.
type RouteTable interface {
	// List returns every route of the main table with a destination,
	// both families, telling the agent's own apart by their protocol.
	List() ([]TableRoute, error)
	// Replace adds the route with the agent's protocol, or changes the
	// gateway of the one there.
	Replace(Route) error
	// Delete removes the agent's route; one already gone is no error.
	Delete(Route) error
	// DeleteAllOurs removes every route carrying the agent's protocol.
	DeleteAllOurs() error
}

// RuleTable adds and removes iptables rules of one family.
type RuleTable interface {
	AppendUnique(table, chain string, spec ...string) error
	DeleteIfExists(table, chain string, spec ...string) error
}

// Kernel is what the pod network changes on the machine besides files.
type Kernel interface {
	Routes() RouteTable
	// Rules returns the rule table of the family; it may fail when the
	// iptables tools are missing.
	Rules(ipv6 bool) (RuleTable, error)
	// EnableForwarding turns on IP forwarding of the family.
	EnableForwarding(ipv6 bool) error
	// DeleteBridge removes the bridge device of that name, if it is one.
	DeleteBridge(name string) error
}

// HostKernel is the Kernel of the calling thread's network namespace:
// netlink for routes and links, iptables and ip6tables for rules, /proc/sys
// for forwarding.
type HostKernel struct{}

var _ Kernel = HostKernel{}

func (HostKernel) Routes() RouteTable { return netlinkRoutes{} }

func (HostKernel) Rules(ipv6 bool) (RuleTable, error) {
	proto := iptables.ProtocolIPv4
	if ipv6 {
		proto = iptables.ProtocolIPv6
	}
	t, err := iptables.NewWithProtocol(proto)
	if err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	return t, nil
}

func (HostKernel) EnableForwarding(ipv6 bool) error {
	key := "net/ipv4/ip_forward"
	if ipv6 {
		key = "net/ipv6/conf/all/forwarding"
	}
	path := filepath.Join("/proc/sys", key)
	if b, err := os.ReadFile(path); err == nil && string(b) == "1\n" {
		return nil
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable forwarding: %w", err)
	}
	return nil
}

func (HostKernel) DeleteBridge(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("find bridge %s: %w", name, err)
	}
	if link.Type() != "bridge" {
		return nil
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("delete bridge %s: %w", name, err)
	}
	return nil
}

// netlinkRoutes is the main table through rtnetlink.
type netlinkRoutes struct{}

func (netlinkRoutes) List() ([]TableRoute, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	var out []TableRoute
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		out = append(out, TableRoute{Route: Route{Dst: r.Dst, Gw: r.Gw}, Ours: r.Protocol == RouteProtocol})
	}
	return out, nil
}

func (netlinkRoutes) Replace(r Route) error {
	nr := kernelRoute(r)
	if err := netlink.RouteReplace(nr); err != nil {
		return fmt.Errorf("route %s via %s: %w", r.Dst, r.Gw, err)
	}
	return nil
}

func (netlinkRoutes) Delete(r Route) error {
	nr := kernelRoute(r)
	if err := netlink.RouteDel(nr); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("delete route %s via %s: %w", r.Dst, r.Gw, err)
	}
	return nil
}

func (n netlinkRoutes) DeleteAllOurs() error {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: RouteProtocol}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	var errs []error
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		errs = append(errs, n.Delete(Route{Dst: r.Dst, Gw: r.Gw}))
	}
	return errors.Join(errs...)
}

// kernelRoute is r in the main table with the agent's protocol: a delete
// matches only a route that carries it.
func kernelRoute(r Route) *netlink.Route {
	return &netlink.Route{
		Dst:      &net.IPNet{IP: r.Dst.IP, Mask: r.Dst.Mask},
		Gw:       r.Gw,
		Table:    unix.RT_TABLE_MAIN,
		Protocol: RouteProtocol,
	}
}
