package stats

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// unlimitedMemory: cgroup v1 reports "no limit" as a huge page-aligned
// number close to MaxInt64; anything this large means no limit.
const unlimitedMemory = uint64(1) << 62

// cgroupUsage is what one cgroup has used, read at one moment.
type cgroupUsage struct {
	// cpu is the cumulative CPU time in nanoseconds.
	cpu uint64
	// Memory in bytes: usage includes the page cache; the working set is
	// usage less inactive file pages (what the kubelet evicts on); rss is
	// anonymous memory.
	memUsage, workingSet, rss uint64
	pageFaults, majorFaults   uint64
	// memLimit is the cgroup's memory limit; 0 when it has none.
	memLimit uint64
	// created is when the cgroup's directory was made, if known.
	created time.Time
}

// cgroupReader reads usage from the cgroup filesystems mounted at mount,
// v1 (one hierarchy per controller) or v2 (unified).
type cgroupReader struct {
	mount   string
	unified bool
	proc    procFS
}

// errNoCgroup says the cgroup does not exist (the pod ended, the
// container was removed).
var errNoCgroup = errors.New("cgroup does not exist")

// read returns the usage of the cgroup at path ("/" is the root, the
// whole machine).
func (r cgroupReader) read(path string) (cgroupUsage, error) {
	path = filepath.Clean("/" + path)
	if r.unified {
		return r.readV2(path)
	}
	return r.readV1(path)
}

func (r cgroupReader) readV1(path string) (cgroupUsage, error) {
	var u cgroupUsage
	cpuDir := filepath.Join(r.mount, "cpuacct", path)
	if _, err := os.Stat(cpuDir); err != nil {
		// Some hosts mount cpu and cpuacct together under one name only.
		cpuDir = filepath.Join(r.mount, "cpu,cpuacct", path)
	}
	memDir := filepath.Join(r.mount, "memory", path)
	fi, err := os.Stat(memDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return u, fmt.Errorf("%s: %w", memDir, errNoCgroup)
		}
		return u, err
	}
	u.created = changeTime(fi)
	if u.cpu, err = readUint(filepath.Join(cpuDir, "cpuacct.usage")); err != nil {
		return u, err
	}
	if u.memUsage, err = readUint(filepath.Join(memDir, "memory.usage_in_bytes")); err != nil {
		return u, err
	}
	stat, err := readKeyValues(filepath.Join(memDir, "memory.stat"), "total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault")
	if err != nil {
		return u, err
	}
	// The total_ counters include the cgroup's descendants.
	u.workingSet = subFloor(u.memUsage, stat["total_inactive_file"])
	u.rss = stat["total_rss"]
	u.pageFaults = stat["total_pgfault"]
	u.majorFaults = stat["total_pgmajfault"]
	if limit, err := readUint(filepath.Join(memDir, "memory.limit_in_bytes")); err == nil && limit < unlimitedMemory {
		u.memLimit = limit
	}
	return u, nil
}

func (r cgroupReader) readV2(path string) (cgroupUsage, error) {
	var u cgroupUsage
	dir := filepath.Join(r.mount, path)
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return u, fmt.Errorf("%s: %w", dir, errNoCgroup)
		}
		return u, err
	}
	u.created = changeTime(fi)
	if u.cpu, err = readCPUStat(filepath.Join(dir, "cpu.stat")); err != nil {
		return u, err
	}
	stat, err := readKeyValues(filepath.Join(dir, "memory.stat"), "inactive_file", "anon", "pgfault", "pgmajfault")
	if err != nil && !(path == "/" && errors.Is(err, os.ErrNotExist)) {
		return u, err
	}
	if path == "/" {
		// The root has no memory.current: the machine's usage is what
		// /proc/meminfo does not count as free.
		mi, err := r.proc.meminfo()
		if err != nil {
			return u, err
		}
		u.memUsage = subFloor(mi["MemTotal"], mi["MemFree"])
		inactive, ok := stat["inactive_file"]
		if !ok {
			inactive = mi["Inactive(file)"]
		}
		u.workingSet = subFloor(u.memUsage, inactive)
		if anon, ok := stat["anon"]; ok {
			u.rss = anon
		} else {
			u.rss = mi["AnonPages"]
		}
		if stat == nil {
			stat, _ = readKeyValues(filepath.Join(r.proc.root, "vmstat"), "pgfault", "pgmajfault")
		}
		u.pageFaults, u.majorFaults = stat["pgfault"], stat["pgmajfault"]
		return u, nil
	}
	if u.memUsage, err = readUint(filepath.Join(dir, "memory.current")); err != nil {
		return u, err
	}
	u.workingSet = subFloor(u.memUsage, stat["inactive_file"])
	u.rss = stat["anon"]
	u.pageFaults, u.majorFaults = stat["pgfault"], stat["pgmajfault"]
	if limit, err := readUint(filepath.Join(dir, "memory.max")); err == nil && limit < unlimitedMemory {
		u.memLimit = limit
	}
	return u, nil
}

// readCPU returns only the cgroup's cumulative CPU time in nanoseconds,
// which is all the housekeeping keeps of a cgroup: one file, where read
// takes five (memory.stat, the longest, among them).
func (r cgroupReader) readCPU(path string) (uint64, error) {
	path = filepath.Clean("/" + path)
	if r.unified {
		v, err := readCPUStat(filepath.Join(r.mount, path, "cpu.stat"))
		return v, noCgroup(err)
	}
	v, err := readUint(filepath.Join(r.mount, "cpuacct", path, "cpuacct.usage"))
	if errors.Is(err, errNoCgroup) {
		// Some hosts mount cpu and cpuacct together under one name only.
		v, err = readUint(filepath.Join(r.mount, "cpu,cpuacct", path, "cpuacct.usage"))
	}
	return v, err
}

// readCPUStat is a v2 cpu.stat's usage_usec, in nanoseconds.
func readCPUStat(file string) (uint64, error) {
	cpu, err := readKeyValues(file, "usage_usec")
	if err != nil {
		return 0, err
	}
	usec, ok := cpu["usage_usec"]
	if !ok {
		return 0, fmt.Errorf("%s: no usage_usec", file)
	}
	return usec * 1000, nil
}

// noCgroup marks a file that is not there as errNoCgroup, as readUint does.
func noCgroup(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", errNoCgroup, err)
	}
	return err
}

// readUint reads a file holding one number; "max" reads as MaxUint64.
func readUint(path string) (uint64, error) {
	var v uint64
	err := withFile(path, func(data []byte) error {
		s := bytes.TrimSpace(data)
		if string(s) == "max" {
			v = math.MaxUint64
			return nil
		}
		var err error
		if v, err = strconv.ParseUint(string(s), 10, 64); err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%s: %w", path, errNoCgroup)
	}
	return v, err
}

// readKeyValues reads the given keys of a flat keyed file ("key value"
// per line), such as memory.stat or cpu.stat; a key the file lacks, or
// whose value is no number, is not in the map.
func readKeyValues(path string, keys ...string) (map[string]uint64, error) {
	out := make(map[string]uint64, len(keys))
	err := withFile(path, func(data []byte) error {
		for len(data) > 0 {
			var line []byte
			line, data, _ = bytes.Cut(data, []byte{'\n'})
			k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte{' '})
			if !ok {
				continue
			}
			for _, want := range keys {
				if string(k) != want {
					continue
				}
				if n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64); err == nil {
					out[want] = n
				}
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// smallFiles lends the buffers that cgroup and proc files are read into:
// each round of the housekeeping reads a few for every pod and container,
// and os.ReadFile's buffer for each was garbage at once.
var smallFiles = sync.Pool{New: func() any {
	b := make([]byte, 0, 8192)
	return &b
}}

// withFile reads the file at path into a lent buffer and hands its
// content to use, which must not keep it.
func withFile(path string, use func([]byte) error) error {
	bp := smallFiles.Get().(*[]byte)
	b, err := readSmall(path, (*bp)[:0])
	defer func() {
		*bp = b[:0]
		smallFiles.Put(bp)
	}()
	if err != nil {
		return err
	}
	return use(b)
}

func subFloor(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
