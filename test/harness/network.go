package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// insecureLocalClient talks to the control plane's self-signed health endpoints on
// 127.0.0.1 only.
var insecureLocalClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

func run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// setupNetwork makes the nodes' shared segment: a bridge in a network namespace of its own
// (lanNetns), with the machine's link onto it (lanLink) carrying the first node's IP
// (NodeIP); the other nodes plug in there too. The service and cluster ranges are routed
// onto the segment, so that no packet for them leaves the machine through the default
// route: what no node or rule claims dies there.
func (c *Config) setupNetwork(ctx context.Context) error {
	steps := [][]string{
		{"ip", "netns", "add", lanNetns},
		{"ip", "-n", lanNetns, "link", "add", lanBridge, "type", "bridge"},
		{"ip", "-n", lanNetns, "link", "set", lanBridge, "up"},
		{"ip", "link", "add", lanLink, "type", "veth", "peer", "name", lanPort, "netns", lanNetns},
		{"ip", "-n", lanNetns, "link", "set", lanPort, "master", lanBridge, "up"},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", NodeIP, lanPrefix), "dev", lanLink},
		{"ip", "link", "set", lanLink, "up"},
		{"ip", "route", "replace", ServiceCIDR, "dev", lanLink},
		{"ip", "route", "replace", ClusterCIDR, "dev", lanLink},
	}
	for _, s := range steps {
		if _, err := run(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	// The switch only switches: no iptables on its bridged frames (br_netfilter's
	// setting is per namespace where the kernel has it so).
	_ = InNetns(lanNetns, func() error {
		return os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("0"), 0o644)
	})
	// Bridged pod traffic and the port mappings of CNI need forwarding.
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}

// teardownNetwork removes the interfaces, routes and iptables rules the harness and its CNI
// network made. Missing pieces are fine: it runs after crashed runs too.
func (c *Config) teardownNetwork(ctx context.Context) error {
	var errs []string
	// vethNode is the first node's link of older runs, before the nodes shared a bridge.
	devs := []string{lanLink, lanDead, vethNode, bridgeDev}
	for i := 2; i <= MaxNodes; i++ {
		devs = append(devs, "na-veth"+strconv.Itoa(i)) // gone with their node, unless it is stuck
	}
	for _, dev := range devs {
		if linkExists(dev) {
			if _, err := run(ctx, "ip", "link", "del", dev); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	// The switch's namespace, with the bridge and every port still in it.
	if _, err := os.Stat(filepath.Join(netnsDir, lanNetns)); err == nil {
		if _, err := run(ctx, "ip", "netns", "del", lanNetns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, cidr := range []string{ServiceCIDR, ClusterCIDR} {
		// Routes via the segment went with it; only a route left by some other path remains.
		if out, _ := run(ctx, "ip", "route", "show", cidr); strings.Contains(out, vethNode) || strings.Contains(out, lanLink) {
			_, _ = run(ctx, "ip", "route", "del", cidr)
		}
	}
	if err := c.cleanIptables(ctx); err != nil {
		errs = append(errs, err.Error())
	}
	// CNI plugins cache their results outside any config we can point elsewhere.
	matches, _ := filepath.Glob("/var/lib/cni/results/" + cniNet + "-*")
	for _, m := range matches {
		_ = os.Remove(m)
	}
	if len(errs) > 0 {
		return fmt.Errorf("network teardown: %s", strings.Join(errs, "; "))
	}
	return nil
}

func linkExists(dev string) bool {
	_, err := os.Stat("/sys/class/net/" + dev)
	return err == nil
}

// cleanIptables deletes the rules of the harness's CNI network: every rule whose comment
// names the network, and the per-container chains (CNI-<hash>, CNI-DN-<hash>) those rules
// jumped to. The shared portmap chains are emptied of our rules and removed once empty.
func (c *Config) cleanIptables(ctx context.Context) error {
	if _, err := exec.LookPath("iptables-save"); err != nil {
		return nil
	}
	for _, table := range []string{"nat", "filter"} {
		out, err := run(ctx, "iptables-save", "-t", table)
		if err != nil {
			return err
		}
		ours := map[string]bool{} // chains our rules jump to
		var deletes [][]string
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "-A ") || !harnessRule(line) {
				continue
			}
			fields := splitRule(line)
			for i, f := range fields {
				if (f == "-j" || f == "-g") && i+1 < len(fields) && strings.HasPrefix(fields[i+1], "CNI-") {
					ours[fields[i+1]] = true
				}
			}
			deletes = append(deletes, fields)
		}
		for _, fields := range deletes {
			_, _ = run(ctx, "iptables", append([]string{"-t", table, "-D"}, fields[1:]...)...)
		}
		for chain := range ours {
			_, _ = run(ctx, "iptables", "-t", table, "-F", chain)
			_, _ = run(ctx, "iptables", "-t", table, "-X", chain)
		}
		// Per-container chains left empty and unreferenced by a CNI call that a killed run
		// cut short: they do nothing, and nothing else names its chains so.
		if err := deleteOrphanCNIChains(ctx, table); err != nil {
			return err
		}
		// The portmap plugin's shared chains, once no port mapping of anyone is left in them:
		// their fixed masquerade and mark rules would otherwise outlive the harness.
		if out, err := run(ctx, "iptables", "-t", table, "-S", "CNI-HOSTPORT-DNAT"); err != nil || strings.Count(out, "\n") <= 1 {
			for _, chain := range []string{"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"} {
				if _, err := run(ctx, "iptables", "-t", table, "-S", chain); err != nil {
					continue
				}
				_ = c.deleteChainRefs(ctx, table, chain)
				_, _ = run(ctx, "iptables", "-t", table, "-F", chain)
				_, _ = run(ctx, "iptables", "-t", table, "-X", chain)
			}
		}
	}
	return nil
}

// harnessRule reports whether a line of iptables-save is a rule of the harness's pod
// networks: the CNI network the harness writes, the one nodeagent writes with
// --pod-network=bridge (network "nodeagent"), and nodeagent's own masquerade rules.
func harnessRule(line string) bool {
	return strings.Contains(line, cniNet) || strings.Contains(line, `\"nodeagent\"`) || strings.Contains(line, `"nodeagent:`)
}

// perContainerChain matches the chains the bridge and portmap plugins name after a
// container (CNI-<24 hex>, CNI-DN-<hex>, CNI-SN-<hex>).
var perContainerChain = regexp.MustCompile(`^CNI-((DN|SN)-)?[0-9a-f]{16,}$`)

// deleteOrphanCNIChains deletes the per-container CNI chains of table that hold no rule
// and that no rule jumps to.
func deleteOrphanCNIChains(ctx context.Context, table string) error {
	out, err := run(ctx, "iptables-save", "-t", table)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	var chains []string
	for _, line := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(line, ":"); ok {
			name, _, _ = strings.Cut(name, " ")
			if perContainerChain.MatchString(name) {
				chains = append(chains, name)
			}
			continue
		}
		if !strings.HasPrefix(line, "-A ") {
			continue
		}
		fields := splitRule(line)
		used[fields[1]] = true
		for i, f := range fields {
			if (f == "-j" || f == "-g") && i+1 < len(fields) {
				used[fields[i+1]] = true
			}
		}
	}
	for _, chain := range chains {
		if !used[chain] {
			_, _ = run(ctx, "iptables", "-t", table, "-X", chain)
		}
	}
	return nil
}

// deleteChainRefs removes the jumps to an empty chain so that it can be deleted.
func (c *Config) deleteChainRefs(ctx context.Context, table, chain string) error {
	out, err := run(ctx, "iptables-save", "-t", table)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "-A ") && strings.Contains(line, "-j "+chain) {
			fields := splitRule(line)
			_, _ = run(ctx, "iptables", append([]string{"-t", table, "-D"}, fields[1:]...)...)
		}
	}
	return nil
}

// splitRule splits a line of iptables-save into arguments, undoing its quoting of comments
// (which may hold escaped quotes, as CNI's `name: "net" id: "..."` does).
func splitRule(line string) []string {
	var out []string
	var cur strings.Builder
	inQuote, escaped, quoted := false, false, false
	for _, r := range line {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && inQuote:
			escaped = true
		case r == '"':
			inQuote, quoted = !inQuote, true
		case r == ' ' && !inQuote:
			if quoted || cur.Len() > 0 {
				out = append(out, cur.String())
			}
			cur.Reset()
			quoted = false
		default:
			cur.WriteRune(r)
		}
	}
	if quoted || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}
