package framework

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodeagent/nodeagent/test/harness"
)

// MachineState is what of the machine's shared state a harness run could leave behind.
// It is read independently of the harness's own teardown code, straight from /proc, /sys
// and the tools a user would use.
type MachineState struct {
	Processes []string // processes of the harness: its binaries, shims, pod processes
	Mounts    []string // mount points under the run dir, and netns mounts of the runtime
	Cgroups   []string // the harness's cgroup root in any hierarchy
	Links     []string // network interfaces
	Netns     []string // named network namespaces (ip netns)
	Iptables  []string // rules and chains of the harness's CNI network, kube-proxy's and the kubelet's
	Nftables  []string // kube-proxy's nftables tables
	Routes    []string // routes through the harness's interfaces
	Paths     []string // kubeadm's fixed paths (a kubeadm cluster's nodes have their own)
}

// ReadMachineState reads the current state for a harness using cfg.
func ReadMachineState(cfg *harness.Config) (MachineState, error) {
	var s MachineState
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return s, err
	}
	self := os.Getpid()
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cmd := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		// The first node's cgroup root, and the other nodes' (CgroupRoot-node2, …).
		ours := strings.HasPrefix(exe, cfg.CacheDir+"/") || strings.HasPrefix(exe, cfg.RunDir+"/") ||
			strings.Contains(cmd, cfg.RunDir+"/") || strings.Contains(string(cg), ":"+harness.CgroupRoot+"/") ||
			strings.Contains(string(cg), ":"+harness.CgroupRoot+"-node") ||
			strings.HasSuffix(string(cg), ":"+harness.CgroupRoot+"\n")
		if ours {
			s.Processes = append(s.Processes, fmt.Sprintf("%d %s", pid, cmd))
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return s, err
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		point := fields[4]
		if point == cfg.RunDir || strings.HasPrefix(point, cfg.RunDir+"/") {
			s.Mounts = append(s.Mounts, point)
		}
	}
	f.Close()
	for _, hier := range []string{"cpu", "memory", "pids", "cpuset", "blkio", "devices", "freezer", "systemd", "unified", "hugetlb", "net_cls", "perf_event", ""} {
		found, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", hier, harness.CgroupRoot) + "*")
		s.Cgroups = append(s.Cgroups, found...)
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		s.Links = append(s.Links, l.Name())
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" {
				s.Netns = append(s.Netns, strings.Fields(line)[0])
			}
		}
	}
	for _, table := range []string{"nat", "filter"} {
		out, err := exec.Command("iptables-save", "-t", table).Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "nodeagent-pods") || strings.Contains(line, `"nodeagent:`) || strings.Contains(line, `\"nodeagent\"`) ||
				strings.HasPrefix(line, ":CNI-") || strings.Contains(line, "-j CNI-") {
				s.Iptables = append(s.Iptables, table+": "+line)
			}
		}
	}
	// The chains of kube-proxy and of the upstream kubelet (which the harness runs for
	// comparison), in both families and every table they write: neither removes all of
	// its own.
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		for _, table := range []string{"nat", "filter", "mangle"} {
			out, err := exec.Command(save, "-t", table).Output()
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, ":KUBE-") {
					s.Iptables = append(s.Iptables, save+" "+table+": "+line)
				}
			}
		}
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "table" && f[2] == "kube-proxy" {
				s.Nftables = append(s.Nftables, line)
			}
		}
	}
	if out, err := exec.Command("ip", "route", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "na-node0") || strings.Contains(line, "na-cni0") || strings.Contains(line, "na-lan") {
				s.Routes = append(s.Routes, line)
			}
		}
	}
	for _, p := range []string{"/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd", "/lib/modules"} {
		if _, err := os.Lstat(p); err == nil {
			s.Paths = append(s.Paths, p)
		}
	}
	return s, nil
}

// Leftovers compares after with the state before the harness ran, and lists what the
// harness left behind: anything of its own, and any interface or netns that is new.
func Leftovers(before, after MachineState) []string {
	var out []string
	add := func(kind string, items []string) {
		for _, it := range items {
			out = append(out, kind+": "+it)
		}
	}
	add("process", after.Processes)
	add("mount", after.Mounts)
	add("cgroup", after.Cgroups)
	add("iptables", after.Iptables)
	add("nftables", after.Nftables)
	add("route", after.Routes)
	add("interface", newItems(before.Links, after.Links))
	add("netns", newItems(before.Netns, after.Netns))
	add("path", newItems(before.Paths, after.Paths))
	for _, l := range after.Links {
		if strings.HasPrefix(l, "na-") {
			add("interface", []string{l})
		}
	}
	return out
}

func newItems(before, after []string) []string {
	seen := map[string]bool{}
	for _, b := range before {
		seen[b] = true
	}
	var out []string
	for _, a := range after {
		if !seen[a] {
			out = append(out, a)
		}
	}
	return out
}
