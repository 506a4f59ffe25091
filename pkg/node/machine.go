package node

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Machine holds what the node reports about its host.
type Machine struct {
	// NumCPU is the number of logical CPUs.
	NumCPU int
	// MemoryBytes is MemTotal from /proc/meminfo.
	MemoryBytes int64
	// HugePages maps a page size ("2Mi", "1Gi") to the bytes reserved in pages of that size.
	HugePages map[string]int64
	// EphemeralStorageBytes is the size of the filesystem that holds the root
	// dir; zero when it is not measured (HostReader.NoEphemeralStorage), and
	// ephemeral-storage is then not part of the node's capacity.
	EphemeralStorageBytes int64
	// MachineID, SystemUUID and BootID identify the host and its current boot.
	MachineID, SystemUUID, BootID string
	// KernelVersion is the kernel release (uname -r).
	KernelVersion string
	// OSImage is PRETTY_NAME from os-release.
	OSImage string
	// InUserNamespace tells whether the agent runs in a user namespace (rootless).
	InUserNamespace bool
}

// HostReader reads Machine facts from the host. Root is prepended to every
// absolute path it reads, so tests can point it at a fake tree.
type HostReader struct {
	// Root is the directory that stands for "/"; empty means the real root.
	Root string
	// RootDir is the agent's root dir (--root-dir) whose filesystem gives
	// ephemeral-storage. It is not prefixed with Root.
	RootDir string
	// StatFS returns the size in bytes of the filesystem holding path;
	// nil means statfs(2).
	StatFS func(path string) (int64, error)
	// NoEphemeralStorage leaves the root dir's filesystem unmeasured and
	// ephemeral-storage out of the node's capacity, as the kubelet does
	// with localStorageCapacityIsolation false.
	NoEphemeralStorage bool
}

func (h HostReader) read(path string) (string, error) {
	b, err := os.ReadFile(filepath.Join(h.Root, path))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Read gathers the Machine facts. Only memory and storage are required; an
// unreadable identity file leaves its field empty, as the kubelet does.
func (h HostReader) Read() (Machine, error) {
	m := Machine{NumCPU: h.numCPU()}
	meminfo, err := h.read("/proc/meminfo")
	if err != nil {
		return m, fmt.Errorf("read memory size: %w", err)
	}
	if m.MemoryBytes, err = parseMemTotal(meminfo); err != nil {
		return m, fmt.Errorf("read memory size: %w", err)
	}
	statfs := h.StatFS
	if statfs == nil {
		statfs = statFilesystem
	}
	if !h.NoEphemeralStorage {
		if m.EphemeralStorageBytes, err = statfs(h.RootDir); err != nil {
			return m, fmt.Errorf("size of the filesystem holding %s: %w", h.RootDir, err)
		}
	}
	if m.HugePages, err = h.hugePages(); err != nil {
		return m, err
	}
	m.MachineID, _ = h.read("/etc/machine-id")
	m.SystemUUID, _ = h.read("/sys/class/dmi/id/product_uuid")
	if m.SystemUUID == "" {
		// Without DMI (many VMs), the kubelet (through cAdvisor) reports the machine ID.
		m.SystemUUID = m.MachineID
	}
	m.BootID, _ = h.read("/proc/sys/kernel/random/boot_id")
	// The initial user namespace maps every ID onto itself.
	if uidMap, err := h.read("/proc/self/uid_map"); err == nil {
		m.InUserNamespace = strings.Join(strings.Fields(uidMap), " ") != "0 0 4294967295"
	}
	m.KernelVersion, _ = h.read("/proc/sys/kernel/osrelease")
	m.OSImage = "Linux"
	if osRelease, err := h.read("/etc/os-release"); err == nil {
		if pretty := parseOSRelease(osRelease)["PRETTY_NAME"]; pretty != "" {
			m.OSImage = pretty
		}
	}
	return m, nil
}

func (h HostReader) numCPU() int {
	cpuinfo, err := h.read("/proc/cpuinfo")
	if err != nil {
		return goruntime.NumCPU()
	}
	n := 0
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, _, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "processor" {
			n++
		}
	}
	if n == 0 {
		return goruntime.NumCPU()
	}
	return n
}

func parseMemTotal(meminfo string) (int64, error) {
	for _, line := range strings.Split(meminfo, "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse MemTotal %q: %w", fields[1], err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}

// hugePages reads /sys/kernel/mm/hugepages/hugepages-<N>kB/nr_hugepages.
// A missing directory means the kernel has no huge page support: no entries.
func (h HostReader) hugePages() (map[string]int64, error) {
	dir := filepath.Join(h.Root, "/sys/kernel/mm/hugepages")
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read huge page sizes: %w", err)
	}
	out := map[string]int64{}
	for _, e := range entries {
		kbStr, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(kbStr, "kB"), 10, 64)
		if err != nil {
			continue
		}
		nrStr, err := h.read(filepath.Join("/sys/kernel/mm/hugepages", e.Name(), "nr_hugepages"))
		if err != nil {
			return nil, fmt.Errorf("read huge pages of %s: %w", e.Name(), err)
		}
		nr, err := strconv.ParseInt(nrStr, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse nr_hugepages of %s: %w", e.Name(), err)
		}
		size := resource.NewQuantity(kb*1024, resource.BinarySI).String()
		out[size] = nr * kb * 1024
	}
	return out, nil
}

func parseOSRelease(content string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewBufferString(content))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		} else {
			v = strings.Trim(v, `"'`)
		}
		out[k] = v
	}
	return out
}

func statFilesystem(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks) * st.Bsize, nil
}
