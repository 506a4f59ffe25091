package stats

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// v1Cgroup writes one cgroup of a fake v1 tree: cpuacct and memory.
func v1Cgroup(t testing.TB, mount, path string, cpuNanos, usage, limit, inactiveFile, rss uint64) {
	t.Helper()
	writeFile(t, filepath.Join(mount, "cpuacct", path, "cpuacct.usage"), itoa(cpuNanos)+"\n")
	mem := filepath.Join(mount, "memory", path)
	writeFile(t, filepath.Join(mem, "memory.usage_in_bytes"), itoa(usage)+"\n")
	writeFile(t, filepath.Join(mem, "memory.limit_in_bytes"), itoa(limit)+"\n")
	writeFile(t, filepath.Join(mem, "memory.stat"),
		"cache 1\nrss 2\ninactive_file 3\ntotal_cache 100\ntotal_rss "+itoa(rss)+"\ntotal_inactive_file "+itoa(inactiveFile)+
			"\ntotal_pgfault 70\ntotal_pgmajfault 7\n")
}

// v2Cgroup writes one non-root cgroup of a fake v2 tree.
func v2Cgroup(t testing.TB, mount, path string, cpuUsec, current uint64, max string, inactiveFile, anon uint64) {
	t.Helper()
	dir := filepath.Join(mount, path)
	writeFile(t, filepath.Join(dir, "cpu.stat"), "usage_usec "+itoa(cpuUsec)+"\nuser_usec 1\nsystem_usec 2\n")
	writeFile(t, filepath.Join(dir, "memory.current"), itoa(current)+"\n")
	writeFile(t, filepath.Join(dir, "memory.max"), max+"\n")
	writeFile(t, filepath.Join(dir, "memory.stat"), "anon "+itoa(anon)+"\nfile 500\ninactive_file "+itoa(inactiveFile)+"\npgfault 40\npgmajfault 4\n")
}

func fakeProc(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "meminfo"), "MemTotal:       16384000 kB\nMemFree:         4096000 kB\nInactive(file):  2048000 kB\nAnonPages:       1024000 kB\n")
	writeFile(t, filepath.Join(root, "stat"), "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n")
	writeFile(t, filepath.Join(root, "vmstat"), "pgfault 900\npgmajfault 9\n")
	writeFile(t, filepath.Join(root, "sys", "kernel", "pid_max"), "4194304\n")
	writeFile(t, filepath.Join(root, "sys", "kernel", "threads-max"), "120000\n")
	writeFile(t, filepath.Join(root, "self", "net", "dev"), `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0
  eth0: 1000   17393    2    0    0     0          0         0  2000   14484    3    0    0     0       0          0
  veth1234: 50   1    0    0    0     0          0         0  60   1    0    0    0     0       0          0
  na-cni0: 70   1    0    0    0     0          0         0  80   1    0    0    0     0       0          0
`)
	writeFile(t, filepath.Join(root, "self", "net", "route"), "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"+
		"na-cni0\t0000F40A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\neth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
	writeFile(t, filepath.Join(root, "self", "cgroup"), "4:memory:/system.slice/nodeagent.service\n2:cpuacct:/\n0::/system.slice/nodeagent.service\n")
	writeFile(t, filepath.Join(root, "42", "cgroup"), "4:memory:/system.slice/containerd.service\n0::/system.slice/containerd.service\n")
	return root
}

func TestCgroupV1(t *testing.T) {
	mount := t.TempDir()
	v1Cgroup(t, mount, "/", 5_000_000_000, 8<<30, 9223372036854771712, 2<<30, 1<<30)
	v1Cgroup(t, mount, "/kubepods/burstable/podu1", 3_000_000, 300<<20, 512<<20, 100<<20, 150<<20)
	r := cgroupReader{mount: mount, proc: procFS{root: fakeProc(t)}}

	root, err := r.read("/")
	if err != nil {
		t.Fatal(err)
	}
	if root.cpu != 5_000_000_000 || root.memUsage != 8<<30 || root.workingSet != 6<<30 || root.rss != 1<<30 ||
		root.pageFaults != 70 || root.majorFaults != 7 || root.memLimit != 0 {
		t.Errorf("root = %+v", root)
	}
	pod, err := r.read("/kubepods/burstable/podu1")
	if err != nil {
		t.Fatal(err)
	}
	if pod.cpu != 3_000_000 || pod.workingSet != 200<<20 || pod.memLimit != 512<<20 || pod.created.IsZero() {
		t.Errorf("pod = %+v", pod)
	}
	if _, err := r.read("/kubepods/gone"); !errors.Is(err, errNoCgroup) {
		t.Errorf("missing cgroup: %v, want errNoCgroup", err)
	}
}

func TestCgroupV1WorkingSetNeverNegative(t *testing.T) {
	mount := t.TempDir()
	v1Cgroup(t, mount, "/a", 1, 100, 1000, 500, 0)
	u, err := cgroupReader{mount: mount}.read("/a")
	if err != nil {
		t.Fatal(err)
	}
	if u.workingSet != 0 {
		t.Errorf("working set = %d, want 0 when inactive_file exceeds usage", u.workingSet)
	}
}

func TestCgroupV2(t *testing.T) {
	mount := t.TempDir()
	writeFile(t, filepath.Join(mount, "cgroup.controllers"), "cpu memory pids\n")
	writeFile(t, filepath.Join(mount, "cpu.stat"), "usage_usec 7000000\n")
	writeFile(t, filepath.Join(mount, "memory.stat"), "anon 3000\ninactive_file 1000000000\npgfault 50\npgmajfault 5\n")
	v2Cgroup(t, mount, "/kubepods/podu2", 2500, 400<<20, "max", 50<<20, 300<<20)
	v2Cgroup(t, mount, "/kubepods/podu3", 10, 10<<20, itoa(64<<20), 0, 1)
	r := cgroupReader{mount: mount, unified: true, proc: procFS{root: fakeProc(t)}}

	root, err := r.read("/")
	if err != nil {
		t.Fatal(err)
	}
	// meminfo: total 16384000 kB, free 4096000 kB.
	wantUsage := uint64(16384000-4096000) * 1024
	if root.cpu != 7_000_000_000 || root.memUsage != wantUsage || root.workingSet != wantUsage-1000000000 ||
		root.rss != 3000 || root.pageFaults != 50 || root.majorFaults != 5 {
		t.Errorf("root = %+v", root)
	}
	pod, err := r.read("/kubepods/podu2")
	if err != nil {
		t.Fatal(err)
	}
	if pod.cpu != 2_500_000 || pod.memUsage != 400<<20 || pod.workingSet != 350<<20 || pod.rss != 300<<20 ||
		pod.pageFaults != 40 || pod.majorFaults != 4 || pod.memLimit != 0 {
		t.Errorf("pod = %+v", pod)
	}
	limited, err := r.read("/kubepods/podu3")
	if err != nil {
		t.Fatal(err)
	}
	if limited.memLimit != 64<<20 {
		t.Errorf("limit = %d, want 64Mi", limited.memLimit)
	}
}

func TestCgroupV2RootWithoutMemoryStat(t *testing.T) {
	mount := t.TempDir()
	writeFile(t, filepath.Join(mount, "cpu.stat"), "usage_usec 1\n")
	r := cgroupReader{mount: mount, unified: true, proc: procFS{root: fakeProc(t)}}
	root, err := r.read("/")
	if err != nil {
		t.Fatal(err)
	}
	usage := uint64(16384000-4096000) * 1024
	if root.workingSet != usage-2048000*1024 || root.rss != 1024000*1024 || root.pageFaults != 900 || root.majorFaults != 9 {
		t.Errorf("root from /proc = %+v", root)
	}
}

// readCPU reads what read reads for the CPU, from its one file: v1's cpuacct
// (or cpu,cpuacct where only that name is mounted), v2's cpu.stat.
func TestReadCPU(t *testing.T) {
	v1 := t.TempDir()
	v1Cgroup(t, v1, "/", 5_000_000_000, 8<<30, 9223372036854771712, 2<<30, 1<<30)
	v1Cgroup(t, v1, "/kubepods/podu1", 3_000_000, 300<<20, 512<<20, 100<<20, 150<<20)
	comounted := t.TempDir()
	writeFile(t, filepath.Join(comounted, "cpu,cpuacct", "kubepods", "podu4", "cpuacct.usage"), "42\n")
	v2 := t.TempDir()
	writeFile(t, filepath.Join(v2, "cpu.stat"), "usage_usec 7000000\n")
	v2Cgroup(t, v2, "/kubepods/podu2", 2500, 400<<20, "max", 50<<20, 300<<20)
	writeFile(t, filepath.Join(v2, "kubepods", "odd", "cpu.stat"), "user_usec 1\n")

	for _, c := range []struct {
		name string
		r    cgroupReader
		path string
		want uint64
	}{
		{"v1 root", cgroupReader{mount: v1}, "/", 5_000_000_000},
		{"v1 pod", cgroupReader{mount: v1}, "kubepods/podu1", 3_000_000},
		{"v1 cpu,cpuacct", cgroupReader{mount: comounted}, "/kubepods/podu4", 42},
		{"v2 root", cgroupReader{mount: v2, unified: true}, "/", 7_000_000_000},
		{"v2 pod", cgroupReader{mount: v2, unified: true}, "/kubepods/podu2", 2_500_000},
	} {
		got, err := c.r.readCPU(c.path)
		if err != nil || got != c.want {
			t.Errorf("%s: readCPU(%q) = %d, %v; want %d", c.name, c.path, got, err, c.want)
		}
		if u, err := c.r.read(c.path); err == nil && u.cpu != got {
			t.Errorf("%s: read's cpu %d, readCPU's %d", c.name, u.cpu, got)
		}
	}
	for _, r := range []cgroupReader{{mount: v1}, {mount: comounted}, {mount: v2, unified: true}} {
		if _, err := r.readCPU("/kubepods/gone"); !errors.Is(err, errNoCgroup) {
			t.Errorf("%s: missing cgroup: %v, want errNoCgroup", r.mount, err)
		}
	}
	if _, err := (cgroupReader{mount: v2, unified: true}).readCPU("/kubepods/odd"); err == nil || errors.Is(err, errNoCgroup) {
		t.Errorf("cpu.stat without usage_usec: %v, want an error of its own", err)
	}
}
