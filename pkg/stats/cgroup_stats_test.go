package stats

import (
	"context"
	"path/filepath"
	"testing"
)

// withContainerCgroup adds web's container cgroup below its pod's, with
// a quota, throttling, a peak, an OOM kill and block I/O, and a process
// whose network namespace the pod's counters come from.
func (f *fixture) withContainerCgroup(t *testing.T, unified bool) string {
	t.Helper()
	cg := f.webCgroup + "/" + f.webContainer
	if unified {
		v2Cgroup(t, f.mount, cg, 2_000_000, 120<<20, "268435456", 10<<20, 80<<20)
		dir := filepath.Join(f.mount, cg)
		writeFile(t, filepath.Join(dir, "cpu.stat"), "usage_usec 2000000\nnr_periods 100\nnr_throttled 7\nthrottled_usec 2500000\n")
		writeFile(t, filepath.Join(dir, "cpu.max"), "50000 100000\n")
		writeFile(t, filepath.Join(dir, "cpu.weight"), "4\n")
		writeFile(t, filepath.Join(dir, "memory.peak"), itoa(150<<20)+"\n")
		writeFile(t, filepath.Join(dir, "memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
		writeFile(t, filepath.Join(dir, "io.stat"), "253:16 rbytes=10 wbytes=20 rios=1 wios=2\n")
		writeFile(t, filepath.Join(dir, "cgroup.procs"), "4242\n")
	} else {
		v1Cgroup(t, f.mount, cg, 2_000_000_000, 120<<20, 268435456, 10<<20, 80<<20)
		cpu := filepath.Join(f.mount, "cpu", cg)
		writeFile(t, filepath.Join(cpu, "cpu.stat"), "nr_periods 100\nnr_throttled 7\nthrottled_time 2500000000\n")
		writeFile(t, filepath.Join(cpu, "cpu.cfs_quota_us"), "50000\n")
		writeFile(t, filepath.Join(cpu, "cpu.cfs_period_us"), "100000\n")
		writeFile(t, filepath.Join(cpu, "cpu.shares"), "102\n")
		mem := filepath.Join(f.mount, "memory", cg)
		writeFile(t, filepath.Join(mem, "memory.max_usage_in_bytes"), itoa(150<<20)+"\n")
		writeFile(t, filepath.Join(mem, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
		writeFile(t, filepath.Join(mem, "cgroup.procs"), "4242\n")
		writeFile(t, filepath.Join(f.mount, "blkio", cg, "blkio.throttle.io_service_bytes_recursive"),
			"253:16 Read 10\n253:16 Write 20\n253:16 Sync 30\nTotal 30\n")
	}
	writeFile(t, filepath.Join(f.proc, "4242", "net", "dev"), `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0
  eth0: 500   5    1    2    0     0          0         0  600   6    3    4    0     0       0          0
`)
	return cg
}

func TestCgroupStats(t *testing.T) {
	for _, unified := range []bool{false, true} {
		name := "v1"
		if unified {
			name = "v2"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, unified)
			cg := f.withContainerCgroup(t, unified)
			got, err := f.provider.CgroupStats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			byID := map[string]CgroupStats{}
			for _, s := range got {
				byID[s.Cgroup] = s
			}
			root, ok := byID["/"]
			if !ok || root.Pod != "" || root.CPUNanoseconds == nil || root.Memory == nil || root.Memory.WorkingSet == nil {
				t.Fatalf("root: %+v", root)
			}
			if len(root.Network) != 2 || root.Network[0].Name != "eth0" {
				t.Errorf("root network %+v, want eth0 and na-cni0 without lo and veth", root.Network)
			}

			pod, ok := byID[f.webCgroup]
			if !ok || pod.Pod != "web" || pod.Namespace != "default" || pod.Container != "" || pod.ContainerID != "" {
				t.Fatalf("pod: %+v", pod)
			}
			if len(pod.Network) != 1 || pod.Network[0] != (InterfaceCounters{Name: "eth0", RxBytes: 500, RxPackets: 5, RxErrors: 1, RxDropped: 2,
				TxBytes: 600, TxPackets: 6, TxErrors: 3, TxDropped: 4}) {
				t.Errorf("pod network %+v, want the netns counters of a process in its cgroup", pod.Network)
			}

			c, ok := byID[cg]
			if !ok {
				t.Fatalf("no container cgroup %s among %v", cg, got)
			}
			if c.Container != "app" || c.ContainerID != f.webContainer || c.Pod != "web" {
				t.Errorf("container labels: %+v", c)
			}
			if c.CPUNanoseconds == nil || *c.CPUNanoseconds != 2_000_000_000 {
				t.Errorf("container cpu %v, want the runtime's", c.CPUNanoseconds)
			}
			if c.CFS == nil || *c.CFS != (CFSStats{Periods: 100, ThrottledPeriods: 7, ThrottledNanoseconds: 2_500_000_000}) {
				t.Errorf("cfs %+v", c.CFS)
			}
			// v2 keeps a weight: 102 shares became weight 4, which reads back as 80.
			wantShares := uint64(102)
			if unified {
				wantShares = 80
			}
			if c.CPUSpec == nil || c.CPUSpec.Quota != 50000 || c.CPUSpec.Period != 100000 || c.CPUSpec.Shares != wantShares {
				t.Errorf("cpu spec %+v", c.CPUSpec)
			}
			m := c.Memory
			if m == nil || val(m.WorkingSet) != 100<<20 || val(m.MaxUsage) != 150<<20 || val(m.Limit) != 268435456 || m.Cache == nil {
				t.Errorf("memory %+v", m)
			}
			if val(c.OOMKills) != 1 {
				t.Errorf("oom kills %v", c.OOMKills)
			}
			if len(c.DiskIO) != 1 || c.DiskIO[0].ReadBytes != 10 || c.DiskIO[0].WriteBytes != 20 || c.DiskIO[0].MajorMinor != "253:16" {
				t.Errorf("disk io %+v", c.DiskIO)
			}
			if len(c.Filesystems) != 1 || c.Filesystems[0].Usage != 4096 || c.Filesystems[0].Limit == 0 {
				t.Errorf("filesystems %+v", c.Filesystems)
			}

			// The job's pod has no cgroup the agent knows: it is listed by
			// its sandbox with the runtime's CPU.
			job, ok := byID["/sb-job"]
			if !ok || job.CPUNanoseconds == nil {
				t.Errorf("job pod: %+v", job)
			}
			main, ok := byID["/sb-job/c-main"]
			if ok {
				t.Errorf("job's container under the sandbox's id: %+v", main)
			}
		})
	}
}

func TestWeightToShares(t *testing.T) {
	for _, tt := range []struct{ weight, shares uint64 }{{1, 2}, {100, 2597}, {10000, 262144}} {
		if got := weightToShares(tt.weight); got != tt.shares {
			t.Errorf("weightToShares(%d) = %d, want %d", tt.weight, got, tt.shares)
		}
	}
}
