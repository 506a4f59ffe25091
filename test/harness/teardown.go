package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CgroupRoot is the cgroup under which the node agent puts every pod (its cgroupRoot), so
// that teardown removes exactly the harness's cgroups.
const CgroupRoot = "/nodeagent-harness"

// removeAllPods stops and removes every pod sandbox through CRI, which makes the runtime
// run CNI DEL (releasing IPs and iptables rules), drop the netns and unmount rootfs.
func (c *Config) removeAllPods(ctx context.Context) error { return c.removeNodePods(ctx, nodeAt(0)) }

// removeNodePods is removeAllPods on node n.
func (c *Config) removeNodePods(ctx context.Context, n Node) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rt, _, closeFn, err := c.NodeCRI(ctx, n)
	if err != nil {
		return err
	}
	defer closeFn()
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range resp.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox %s: %w", sb.Id, err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox %s: %w", sb.Id, err))
		}
	}
	return errors.Join(errs...)
}

// killStaleContainers kills what survives its runtime: runc shims started by the harness's
// containerd, and every process left in the harness's pod cgroups.
func (c *Config) killStaleContainers(ctx context.Context) error {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(string(cmdline), "\x00")
		// A shim names its containerd's state dir (its -address socket lives in it).
		if len(args) > 0 && strings.HasSuffix(args[0], "containerd-shim-runc-v2") && strings.Contains(string(cmdline), c.RunDir+"/") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	var errs []error
	for _, dir := range c.cgroupDirs() {
		if !waitFor(ctx, 10*time.Second, func() bool { return killCgroupProcs(dir) == 0 }) {
			errs = append(errs, fmt.Errorf("processes remain in %s", dir))
		}
	}
	return errors.Join(errs...)
}

// killCgroupProcs SIGKILLs every process in the cgroup tree at dir, returning how many it saw.
func killCgroupProcs(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				n++
			}
		}
		return nil
	})
	return n
}

// cgroupDirs lists the nodes' cgroup roots in every mounted cgroup hierarchy where they exist.
func (c *Config) cgroupDirs() []string {
	var dirs []string
	for _, m := range mounts() {
		if m.fstype != "cgroup" && m.fstype != "cgroup2" {
			continue
		}
		// The first node's root and the other nodes' (CgroupRoot-node2, …).
		found, _ := filepath.Glob(filepath.Join(m.point, CgroupRoot) + "*")
		for _, d := range found {
			if base := filepath.Base(d); base == filepath.Base(CgroupRoot) || strings.HasPrefix(base, filepath.Base(CgroupRoot)+"-node") {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// removeCgroups removes the cgroup trees under CgroupRoot, deepest first.
func (c *Config) removeCgroups() error {
	var errs []error
	for _, root := range c.cgroupDirs() {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

type mountEntry struct{ point, fstype string }

// mounts reads /proc/self/mountinfo, unescaping mount points.
func mounts() []mountEntry {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, fl := range fields {
			if fl == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mountEntry{point: unescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountsUnder lists mount points at or below dir.
func MountsUnder(dir string) []string {
	var out []string
	for _, m := range mounts() {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m.point)
		}
	}
	return out
}

// unmountAll lazily unmounts everything below the run dir, deepest first, until nothing is
// left (a mount may hide another at the same point).
func (c *Config) unmountAll() error {
	for range 10 {
		points := MountsUnder(c.RunDir)
		if len(points) == 0 {
			return nil
		}
		sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
		for _, p := range points {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
		}
	}
	return fmt.Errorf("mounts remain under %s: %v", c.RunDir, MountsUnder(c.RunDir))
}

// createCgroupRoot makes CgroupRoot in every cgroup hierarchy, as an administrator does for
// a kubelet's cgroupRoot: the agents expect it to exist.
func (c *Config) createCgroupRoot() error {
	for _, m := range mounts() {
		for _, n := range c.Nodes() {
			if err := createCgroup(m, n.CgroupRoot()); err != nil {
				return err
			}
		}
	}
	return nil
}

func createCgroup(m mountEntry, root string) error {
	if m.fstype != "cgroup" && m.fstype != "cgroup2" {
		return nil
	}
	d := filepath.Join(m.point, root)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	// A v1 cpuset cgroup takes no process until its cpus and mems are set.
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		if v, err := os.ReadFile(filepath.Join(m.point, f)); err == nil {
			if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
