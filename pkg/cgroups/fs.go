package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	occgroups "github.com/opencontainers/cgroups"
)

// hierarchy writes cgroups of one kind of cgroup filesystem. Paths are
// below the mount point ("/kubepods/burstable").
type hierarchy interface {
	// create makes the cgroup (in every hierarchy, for v1), ready for
	// processes to join.
	create(p string) error
	// set writes the limits of r that are not nil.
	set(p string, r Resources) error
	// exists says whether the cgroup is there.
	exists(p string) bool
	// procs lists the processes in the cgroup and its descendants.
	procs(p string) ([]int, error)
	// remove deletes the cgroup and its descendants, deepest first. A
	// cgroup that still holds processes fails with EBUSY.
	remove(p string) error
	// children lists the names of the cgroup's child cgroups.
	children(p string) ([]string, error)
}

// writeFile writes one cgroup interface file.
func writeFile(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, file), err)
	}
	return nil
}

// readProcs reads every cgroup.procs in the tree at dir.
func readProcs(dir string) ([]int, error) {
	var out []int
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out, err
}

// removeTree removes dir and every directory below it, deepest first.
func removeTree(dir string, rmdir func(string) error) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if err := rmdir(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
	}
	return nil
}

func listChildren(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func sysRmdir(p string) error { return syscall.Rmdir(p) }

// legacyFS is the cgroup v1 hierarchy: one mount per controller under mount
// (/sys/fs/cgroup/cpu, /sys/fs/cgroup/memory, ...). A cgroup is created
// in every one of them, name=systemd and a hybrid unified tree included,
// as the runtime creates its containers' cgroups in all of them.
type legacyFS struct {
	mount string
	rmdir func(string) error
}

// dirs is the cgroup's directory in every hierarchy (each mount once:
// comounted controllers appear as symlinks and are skipped).
func (h legacyFS) dirs(p string) []string {
	entries, _ := os.ReadDir(h.mount)
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Type()&os.ModeSymlink == 0 {
			out = append(out, filepath.Join(h.mount, e.Name(), p))
		}
	}
	return out
}

func (h legacyFS) dir(controller, p string) (string, bool) {
	d := filepath.Join(h.mount, controller)
	if _, err := os.Stat(d); err != nil {
		return "", false
	}
	return filepath.Join(d, p), true
}

func (h legacyFS) create(p string) error {
	for _, d := range h.dirs(p) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup: %w", err)
		}
	}
	// A new cpuset cgroup has no cpus and no memory nodes: nothing could
	// run in it until they are copied down from its parent.
	if d, ok := h.dir("cpuset", p); ok {
		return copyCpuset(filepath.Join(h.mount, "cpuset"), d)
	}
	return nil
}

// copyCpuset fills the empty cpuset.cpus and cpuset.mems of every level
// from root down to dir from the level above.
func copyCpuset(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return err
	}
	parent := root
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		cur := filepath.Join(parent, c)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(cur, f))
			if err == nil && strings.TrimSpace(string(b)) != "" {
				continue
			}
			pb, err := os.ReadFile(filepath.Join(parent, f))
			if err != nil {
				return fmt.Errorf("read %s: %w", filepath.Join(parent, f), err)
			}
			if err := writeFile(cur, f, strings.TrimSpace(string(pb))); err != nil {
				return err
			}
		}
		parent = cur
	}
	return nil
}

func (h legacyFS) set(p string, r Resources) error {
	if d, ok := h.dir("cpu", p); ok {
		if r.CPUShares != nil {
			if err := writeFile(d, "cpu.shares", strconv.FormatUint(*r.CPUShares, 10)); err != nil {
				return err
			}
		}
		if r.CPUPeriod != nil {
			if err := writeFile(d, "cpu.cfs_period_us", strconv.FormatUint(*r.CPUPeriod, 10)); err != nil {
				return err
			}
		}
		if r.CPUQuota != nil {
			if err := writeFile(d, "cpu.cfs_quota_us", strconv.FormatInt(*r.CPUQuota, 10)); err != nil {
				return err
			}
		}
	}
	if d, ok := h.dir("memory", p); ok && r.Memory != nil {
		v := *r.Memory
		if v <= 0 {
			v = -1
		}
		if err := writeFile(d, "memory.limit_in_bytes", strconv.FormatInt(v, 10)); err != nil {
			return err
		}
	}
	if d, ok := h.dir("pids", p); ok && r.PidsLimit != nil {
		if err := writeFile(d, "pids.max", pidsValue(*r.PidsLimit)); err != nil {
			return err
		}
	}
	if d, ok := h.dir("hugetlb", p); ok {
		for _, size := range sortedSizes(r.HugePages) {
			if err := writeFile(d, "hugetlb."+size+".limit_in_bytes", strconv.FormatInt(r.HugePages[size], 10)); err != nil {
				return err
			}
		}
	}
	return nil
}

// exists looks in the memory hierarchy, then the cpu one (a host may lack
// either): one stat when the cgroup is there.
func (h legacyFS) exists(p string) bool {
	for _, c := range []string{"memory", "cpu"} {
		if _, err := os.Stat(filepath.Join(h.mount, c, p)); err == nil {
			return true
		}
	}
	return false
}

func (h legacyFS) procs(p string) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, d := range h.dirs(p) {
		pids, err := readProcs(d)
		if err != nil {
			return nil, err
		}
		for _, pid := range pids {
			if !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out, nil
}

func (h legacyFS) remove(p string) error {
	var errs []error
	for _, d := range h.dirs(p) {
		if err := removeTree(d, h.rmdir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (h legacyFS) children(p string) ([]string, error) {
	d, ok := h.dir("memory", p)
	if !ok {
		d, _ = h.dir("cpu", p)
	}
	return listChildren(d)
}

// unifiedFS is the cgroup v2 hierarchy: one tree, controllers enabled for a
// cgroup's children through its parent's cgroup.subtree_control.
type unifiedFS struct {
	mount string
	rmdir func(string) error
}

// wantedControllers are enabled down to every cgroup the agent makes.
var wantedControllers = []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids"}

func (h unifiedFS) available() map[string]bool {
	b, _ := os.ReadFile(filepath.Join(h.mount, "cgroup.controllers"))
	out := map[string]bool{}
	for _, c := range strings.Fields(string(b)) {
		out[c] = true
	}
	return out
}

func (h unifiedFS) create(p string) error {
	avail := h.available()
	cur := h.mount
	for _, c := range strings.Split(strings.Trim(p, "/"), "/") {
		if c == "" {
			continue
		}
		// Enable the controllers for the level below before making it.
		enabled, _ := os.ReadFile(filepath.Join(cur, "cgroup.subtree_control"))
		have := map[string]bool{}
		for _, f := range strings.Fields(string(enabled)) {
			have[strings.TrimPrefix(f, "+")] = true
		}
		var add []string
		for _, ctl := range wantedControllers {
			if avail[ctl] && !have[ctl] {
				add = append(add, "+"+ctl)
			}
		}
		if len(add) > 0 {
			if err := writeFile(cur, "cgroup.subtree_control", strings.Join(add, " ")); err != nil {
				return err
			}
		}
		cur = filepath.Join(cur, c)
		if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup: %w", err)
		}
	}
	return nil
}

func (h unifiedFS) set(p string, r Resources) error {
	d := filepath.Join(h.mount, p)
	avail := h.available()
	if r.CPUShares != nil {
		w := occgroups.ConvertCPUSharesToCgroupV2Value(*r.CPUShares)
		if err := writeFile(d, "cpu.weight", strconv.FormatUint(w, 10)); err != nil {
			return err
		}
	}
	if r.CPUQuota != nil || r.CPUPeriod != nil {
		quota := "max"
		if r.CPUQuota != nil && *r.CPUQuota > 0 {
			quota = strconv.FormatInt(*r.CPUQuota, 10)
		}
		period := uint64(100000)
		if r.CPUPeriod != nil {
			period = *r.CPUPeriod
		}
		if err := writeFile(d, "cpu.max", fmt.Sprintf("%s %d", quota, period)); err != nil {
			return err
		}
	}
	if r.Memory != nil {
		v := "max"
		if *r.Memory > 0 {
			v = strconv.FormatInt(*r.Memory, 10)
		}
		if err := writeFile(d, "memory.max", v); err != nil {
			return err
		}
	}
	if r.PidsLimit != nil {
		if err := writeFile(d, "pids.max", pidsValue(*r.PidsLimit)); err != nil {
			return err
		}
	}
	if avail["hugetlb"] {
		for _, size := range sortedSizes(r.HugePages) {
			if err := writeFile(d, "hugetlb."+size+".max", strconv.FormatInt(r.HugePages[size], 10)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h unifiedFS) exists(p string) bool {
	_, err := os.Stat(filepath.Join(h.mount, p))
	return err == nil
}

func (h unifiedFS) procs(p string) ([]int, error) { return readProcs(filepath.Join(h.mount, p)) }

func (h unifiedFS) remove(p string) error { return removeTree(filepath.Join(h.mount, p), h.rmdir) }

func (h unifiedFS) children(p string) ([]string, error) {
	return listChildren(filepath.Join(h.mount, p))
}

func pidsValue(n int64) string {
	if n <= 0 {
		return "max"
	}
	return strconv.FormatInt(n, 10)
}

func sortedSizes(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
