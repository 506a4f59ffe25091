package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procFS reads the host's /proc (a fake tree in tests).
type procFS struct {
	root string
}

func (p procFS) read(name string) ([]byte, error) {
	return readSmall(filepath.Join(p.root, name), make([]byte, 0, 512))
}

// meminfo returns /proc/meminfo in bytes by key (MemTotal, MemFree,
// Inactive(file), AnonPages…).
func (p procFS) meminfo() (map[string]uint64, error) {
	data, err := p.read("meminfo")
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(data), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			v *= 1024
		}
		out[key] = v
	}
	if _, ok := out["MemTotal"]; !ok {
		return nil, fmt.Errorf("%s: no MemTotal", filepath.Join(p.root, "meminfo"))
	}
	return out, nil
}

// interfaceCounters are one interface's counters from /proc/net/dev.
type interfaceCounters struct {
	name                               string
	rxBytes, rxErrors, txBytes, txErrs uint64
	rxPackets, rxDropped               uint64
	txPackets, txDropped               uint64
}

// netDev reads /proc/<pid>/net/dev (pid "self" or "1" for the host's
// network namespace as the agent sees it).
func (p procFS) netDev(pid string) ([]interfaceCounters, error) {
	data, err := p.read(filepath.Join(pid, "net", "dev"))
	if err != nil {
		return nil, err
	}
	return parseNetDev(data)
}

func parseNetDev(data []byte) ([]interfaceCounters, error) {
	var out []interfaceCounters
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			continue
		}
		n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
		out = append(out, interfaceCounters{
			name:    strings.TrimSpace(name),
			rxBytes: n(0), rxPackets: n(1), rxErrors: n(2), rxDropped: n(3),
			txBytes: n(8), txPackets: n(9), txErrs: n(10), txDropped: n(11),
		})
	}
	return out, sc.Err()
}

// defaultRouteInterface names the interface of the IPv4 default route,
// or "" when there is none.
func (p procFS) defaultRouteInterface(pid string) string {
	data, err := p.read(filepath.Join(pid, "net", "route"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 8 && f[1] == "00000000" && f[7] == "00000000" {
			return f[0]
		}
	}
	return ""
}

// bootTime is when the machine booted, from btime in /proc/stat.
func (p procFS) bootTime() (time.Time, error) {
	data, err := p.read("stat")
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("parse btime: %w", err)
			}
			return time.Unix(s, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: no btime", filepath.Join(p.root, "stat"))
}

// maxPID is the most processes the kernel allows: the smaller of
// kernel.pid_max and kernel.threads-max, as the kubelet reports it.
func (p procFS) maxPID() (int64, error) {
	read := func(name string) (int64, error) {
		data, err := p.read(filepath.Join("sys", "kernel", name))
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	}
	maxPID, err := read("pid_max")
	if err != nil {
		return 0, err
	}
	if threads, err := read("threads-max"); err == nil && threads < maxPID {
		maxPID = threads
	}
	return maxPID, nil
}

// cgroupOf returns a process's cgroup path: the unified one on cgroup v2,
// the memory controller's on v1. "" when it cannot be read.
func (p procFS) cgroupOf(pid string, unified bool) string {
	data, err := p.read(filepath.Join(pid, "cgroup"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if unified && parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		if !unified {
			for _, c := range strings.Split(parts[1], ",") {
				if c == "memory" {
					return parts[2]
				}
			}
		}
	}
	return ""
}
