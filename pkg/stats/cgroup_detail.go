package stats

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// cgroupDetail is what cAdvisor reports of a cgroup beyond its CPU time
// and memory usage: CFS throttling, the CPU and memory settings, the
// page cache, peak usage, OOM kills and block I/O. Each part is nil (or
// empty) when its files cannot be read: the root cgroup has no settings,
// and older kernels lack memory.peak or the oom_kill counter.
type cgroupDetail struct {
	cfs      *CFSStats
	cpuSpec  *CPUSpec
	memLimit *uint64
	cache    *uint64
	maxUsage *uint64
	oomKills *uint64
	io       []DiskIO
}

// readDetail reads the detail of the cgroup at path.
func (r cgroupReader) readDetail(path string) cgroupDetail {
	path = filepath.Clean("/" + path)
	if r.unified {
		return r.detailV2(path)
	}
	return r.detailV1(path)
}

func (r cgroupReader) detailV1(path string) cgroupDetail {
	var d cgroupDetail
	cpuDir := filepath.Join(r.mount, "cpu", path)
	if _, err := os.Stat(cpuDir); err != nil {
		cpuDir = filepath.Join(r.mount, "cpu,cpuacct", path)
	}
	if st, err := readKeyValues(filepath.Join(cpuDir, "cpu.stat"), "nr_periods", "nr_throttled", "throttled_time"); err == nil {
		d.cfs = &CFSStats{Periods: st["nr_periods"], ThrottledPeriods: st["nr_throttled"], ThrottledNanoseconds: st["throttled_time"]}
	}
	if period, err := readUint(filepath.Join(cpuDir, "cpu.cfs_period_us")); err == nil {
		spec := &CPUSpec{Period: period}
		// -1 (no quota) does not parse as unsigned: it stays 0, as cAdvisor has it.
		if q, err := readInt(filepath.Join(cpuDir, "cpu.cfs_quota_us")); err == nil && q > 0 {
			spec.Quota = uint64(q)
		}
		if shares, err := readUint(filepath.Join(cpuDir, "cpu.shares")); err == nil {
			spec.Shares = shares
		}
		d.cpuSpec = spec
	}
	memDir := filepath.Join(r.mount, "memory", path)
	if path != "/" {
		if v, err := readUint(filepath.Join(memDir, "memory.limit_in_bytes")); err == nil {
			d.memLimit = ptr(v)
		}
	}
	if st, err := readKeyValues(filepath.Join(memDir, "memory.stat"), "total_cache"); err == nil {
		if v, ok := st["total_cache"]; ok {
			d.cache = ptr(v)
		}
	}
	if v, err := readUint(filepath.Join(memDir, "memory.max_usage_in_bytes")); err == nil {
		d.maxUsage = ptr(v)
	}
	if st, err := readKeyValues(filepath.Join(memDir, "memory.oom_control"), "oom_kill"); err == nil {
		if v, ok := st["oom_kill"]; ok {
			d.oomKills = ptr(v)
		}
	}
	blkio := filepath.Join(r.mount, "blkio", path)
	for _, name := range []string{"blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_service_bytes"} {
		if data, err := os.ReadFile(filepath.Join(blkio, name)); err == nil {
			d.io = parseBlkioServiceBytes(data)
			break
		}
	}
	return d
}

func (r cgroupReader) detailV2(path string) cgroupDetail {
	var d cgroupDetail
	dir := filepath.Join(r.mount, path)
	if st, err := readKeyValues(filepath.Join(dir, "cpu.stat"), "nr_periods", "nr_throttled", "throttled_usec"); err == nil {
		if _, ok := st["nr_periods"]; ok {
			d.cfs = &CFSStats{Periods: st["nr_periods"], ThrottledPeriods: st["nr_throttled"], ThrottledNanoseconds: st["throttled_usec"] * 1000}
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			spec := &CPUSpec{}
			spec.Period, _ = strconv.ParseUint(f[1], 10, 64)
			spec.Quota, _ = strconv.ParseUint(f[0], 10, 64) // "max" stays 0
			if w, err := readUint(filepath.Join(dir, "cpu.weight")); err == nil && w > 0 {
				spec.Shares = weightToShares(w)
			}
			d.cpuSpec = spec
		}
	}
	if path != "/" {
		if v, err := readUint(filepath.Join(dir, "memory.max")); err == nil {
			d.memLimit = ptr(v)
		}
		if st, err := readKeyValues(filepath.Join(dir, "memory.stat"), "file"); err == nil {
			if v, ok := st["file"]; ok {
				d.cache = ptr(v)
			}
		}
		if v, err := readUint(filepath.Join(dir, "memory.peak")); err == nil {
			d.maxUsage = ptr(v)
		}
		if st, err := readKeyValues(filepath.Join(dir, "memory.events"), "oom_kill"); err == nil {
			if v, ok := st["oom_kill"]; ok {
				d.oomKills = ptr(v)
			}
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, "io.stat")); err == nil {
		d.io = parseIOStat(data)
	}
	return d
}

// weightToShares turns cpu.weight (1-10000) back into v1 shares
// (2-262144), inverting the conversion the runtimes apply, as cAdvisor
// reports it.
func weightToShares(w uint64) uint64 {
	return 2 + ((w-1)*262142)/9999
}

// parseBlkioServiceBytes reads v1's "MAJ:MIN Read|Write N" lines.
func parseBlkioServiceBytes(data []byte) []DiskIO {
	byDev := map[string]*DiskIO{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || !strings.Contains(f[0], ":") {
			continue
		}
		v, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			continue
		}
		io := ioFor(byDev, f[0])
		switch f[1] {
		case "Read":
			io.ReadBytes += v
		case "Write":
			io.WriteBytes += v
		}
	}
	return sortedIO(byDev)
}

// parseIOStat reads v2's "MAJ:MIN rbytes=N wbytes=N ..." lines.
func parseIOStat(data []byte) []DiskIO {
	byDev := map[string]*DiskIO{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.Contains(f[0], ":") {
			continue
		}
		io := ioFor(byDev, f[0])
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "rbytes":
				io.ReadBytes += n
			case "wbytes":
				io.WriteBytes += n
			}
		}
	}
	return sortedIO(byDev)
}

func ioFor(byDev map[string]*DiskIO, dev string) *DiskIO {
	io, ok := byDev[dev]
	if !ok {
		io = &DiskIO{MajorMinor: dev}
		byDev[dev] = io
	}
	return io
}

func sortedIO(byDev map[string]*DiskIO) []DiskIO {
	out := make([]DiskIO, 0, len(byDev))
	for _, io := range byDev {
		out = append(out, *io)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MajorMinor < out[j].MajorMinor })
	return out
}

// readInt reads a file holding one signed number.
func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

// firstPID returns a process in the cgroup at path or in one of its
// children (v1: the memory hierarchy), or 0: on v1 a pod's own cgroup
// holds no processes, its sandbox's and containers' cgroups do.
func (r cgroupReader) firstPID(path string) int {
	dir := filepath.Join(r.mount, filepath.Clean("/"+path))
	if !r.unified {
		dir = filepath.Join(r.mount, "memory", filepath.Clean("/"+path))
	}
	if pid := pidIn(dir); pid > 0 {
		return pid
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	for _, e := range entries {
		if e.IsDir() {
			if pid := pidIn(filepath.Join(dir, e.Name())); pid > 0 {
				return pid
			}
		}
	}
	return 0
}

func pidIn(dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(line); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

// childNamed returns the child of the cgroup at path whose name holds id
// (a container's cgroup: <id> under cgroupfs, cri-containerd-<id>.scope
// under systemd), or "".
func (r cgroupReader) childNamed(path, id string) string {
	if id == "" {
		return ""
	}
	path = filepath.Clean("/" + path)
	dir := filepath.Join(r.mount, path)
	if !r.unified {
		dir = filepath.Join(r.mount, "memory", path)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if e.IsDir() && strings.Contains(e.Name(), id) {
			return filepath.Join(path, e.Name())
		}
	}
	return ""
}

// errNoDevice says a block device's name could not be found.
var errNoDevice = errors.New("no such block device")

// blockDeviceName names the block device MAJ:MIN as /dev/<name>, from
// sysfs.
func blockDeviceName(sysRoot, majorMinor string) (string, error) {
	st, err := readKeyValuesStrings(filepath.Join(sysRoot, "dev", "block", majorMinor, "uevent"))
	if err != nil {
		return "", err
	}
	name, ok := st["DEVNAME"]
	if !ok {
		return "", errNoDevice
	}
	return "/dev/" + name, nil
}

// readKeyValuesStrings reads a KEY=value file, such as a uevent.
func readKeyValuesStrings(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out, nil
}
