package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stat    string
		busy    float64
		cores   int
		wantErr bool
	}{
		{
			name: "two cores",
			// user nice system idle iowait irq softirq steal guest guest_nice
			stat: "cpu  1000 20 300 9000 50 7 8 5 40 0\ncpu0 500 10 150 4500 25 3 4 2 20 0\ncpu1 500 10 150 4500 25 4 4 3 20 0\nintr 1 2 3\nctxt 99\n",
			// 1000 + 20 + 300 + 7 + 8 + 5 ticks; guest is inside user, idle and iowait are not busy.
			busy: 13.4, cores: 2,
		},
		{name: "no steal column", stat: "cpu 1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\n", wantErr: true},
		{name: "no cpu lines", stat: "intr 1\n", wantErr: true},
		{name: "no per-core lines", stat: "cpu 1 2 3 4 5 6 7 8 9 10\n", wantErr: true},
		{name: "not a number", stat: "cpu 1 x 3 4 5 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy, cores, err := parseProcStat([]byte(tc.stat))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error; busy %g, cores %d", busy, cores)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !near(busy, tc.busy) || cores != tc.cores {
				t.Errorf("busy %g s on %d cores, want %g s on %d", busy, cores, tc.busy, tc.cores)
			}
		})
	}
}

// cpuSamples are two readings 4 s apart on 2 cores, every daemon of the harness running:
// the machine busy for 7 s of its 8, 5.5 s of them in the daemons.
func cpuSamples() (from, to cpuSample) {
	from = cpuSample{at: t0, busy: 100, cores: 2, procs: map[string]float64{
		"agent": 10, "kube-apiserver": 20, "etcd": 5, "kube-controller-manager": 3, "kube-scheduler": 1, "containerd": 8,
	}}
	to = cpuSample{at: t0.Add(4 * time.Second), busy: 107, cores: 2, procs: map[string]float64{
		"agent": 11, "kube-apiserver": 22, "etcd": 5.5, "kube-controller-manager": 3.25, "kube-scheduler": 1.25, "containerd": 9,
	}}
	return from, to
}

func TestSplitCPU(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(from, to *cpuSample)
		want   map[string]float64
	}{
		{
			name: "every daemon",
			want: map[string]float64{compAgent: 1, compAPIServer: 2, compEtcd: 0.5, compControllers: 0.5, compContainerd: 1, compElse: 2},
		},
		{
			name:   "no agent (the floor)",
			mutate: func(from, to *cpuSample) { delete(from.procs, "agent"); delete(to.procs, "agent") },
			want:   map[string]float64{compAPIServer: 2, compEtcd: 0.5, compControllers: 0.5, compContainerd: 1, compElse: 3},
		},
		{
			name:   "the scheduler gone by the end: the controller-manager alone",
			mutate: func(from, to *cpuSample) { delete(to.procs, "kube-scheduler") },
			want:   map[string]float64{compAgent: 1, compAPIServer: 2, compEtcd: 0.5, compControllers: 0.25, compContainerd: 1, compElse: 2.25},
		},
		{
			name:   "ticks apart: everything else never below zero",
			mutate: func(from, to *cpuSample) { to.busy = 105 },
			want:   map[string]float64{compAgent: 1, compAPIServer: 2, compEtcd: 0.5, compControllers: 0.5, compContainerd: 1, compElse: 0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := cpuSamples()
			if tc.mutate != nil {
				tc.mutate(&from, &to)
			}
			s := splitCPU(from, to)
			if !near(s.WallSeconds, 4) || s.Cores != 2 || !near(s.CapacitySeconds, 8) {
				t.Errorf("span %g s on %d cores, capacity %g; want 4 s on 2, 8", s.WallSeconds, s.Cores, s.CapacitySeconds)
			}
			if len(s.Components) != len(tc.want) {
				t.Errorf("components %v, want %v", s.Components, tc.want)
			}
			for name, v := range tc.want {
				if got, ok := s.Components[name]; !ok || !near(got, v) {
					t.Errorf("%s: %g (present %v), want %g", name, got, ok, v)
				}
			}
		})
	}
}

// splitSides are two rounds of nodeagent, one of the kubelet and one of the floor, each with
// a split of the CPU of its start.
func splitSides() map[string]sideResult {
	split := func(wall, agent, apiserver, containerd, busy float64) *cpuSplit {
		s := &cpuSplit{WallSeconds: wall, Cores: 2, CapacitySeconds: 2 * wall, BusySeconds: busy,
			Components: map[string]float64{compAPIServer: apiserver, compEtcd: 1, compControllers: 0.5, compContainerd: containerd}}
		sum := apiserver + 1 + 0.5 + containerd
		if agent >= 0 {
			s.Components[compAgent] = agent
			sum += agent
		}
		s.Components[compElse] = busy - sum
		return s
	}
	return map[string]sideResult{
		"nodeagent": {Rounds: []roundResult{
			{CPUStart: split(10, 1, 4, 6, 18)},
			{CPUStart: split(12, 2, 5, 7, 20)},
		}},
		"kubelet": {Rounds: []roundResult{{CPUStart: split(10, 4, 4, 6, 19)}}},
		"floor":   {Rounds: []roundResult{{CPUStart: split(5, -1, 0.5, 5, 9)}}},
	}
}

func TestWriteCPUTable(t *testing.T) {
	var b strings.Builder
	writeCPUTable(&b, splitSides())
	t.Logf("\n%s", b.String())
	want := `
CPU while the pods start (first create → all N running; the floor: first CRI call → last container started), medians over rounds:

| component | nodeagent CPU s / share of machine capacity | kubelet CPU s / share of machine capacity | floor CPU s / share of machine capacity |
|---|---|---|---|
| agent (nodeagent or kubelet) | 2 / 8.33 % | 4 / 20 % | — |
| kube-apiserver | 5 / 20.8 % | 4 / 20 % | 0.5 / 5 % |
| etcd | 1 / 5 % | 1 / 5 % | 1 / 10 % |
| kube-controller-manager + kube-scheduler | 0.5 / 2.5 % | 0.5 / 2.5 % | 0.5 / 5 % |
| containerd | 7 / 30 % | 6 / 30 % | 5 / 50 % |
| everything else | 5.5 / 27.5 % | 3.5 / 17.5 % | 2 / 20 % |
| whole machine busy (all of the above) | 20 / 90 % | 19 / 95 % | 9 / 90 % |
| machine capacity (cores × span) | 24 / 100 % | 20 / 100 % | 10 / 100 % |

nodeagent: the span lasted 12 s (median) on 2 cores.
kubelet: the span lasted 10 s (median) on 2 cores.
floor: the span lasted 5 s (median) on 2 cores.
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestWriteCPUTableWithoutSplit(t *testing.T) {
	var b strings.Builder
	writeCPUTable(&b, reportSides())
	if b.Len() != 0 {
		t.Errorf("no split, yet a table:\n%s", b.String())
	}
}

// TestSampleCPU reads this machine's counters, with the test's own process standing in for
// the agent and a pid that is no process for containerd.
func TestSampleCPU(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc/stat:", err)
	}
	pids := map[string]int{"agent": os.Getpid(), "containerd": 1 << 30, "registry": os.Getpid()}
	from, err := sampleCPU(pids)
	if err != nil {
		t.Fatal(err)
	}
	to, err := sampleCPU(pids)
	if err != nil {
		t.Fatal(err)
	}
	if from.cores < 1 || from.busy <= 0 {
		t.Errorf("%d cores, %g s busy", from.cores, from.busy)
	}
	if _, ok := from.procs["agent"]; !ok || len(from.procs) != 1 {
		t.Errorf("daemons read %v, want the agent alone (no such containerd, no registry component)", from.procs)
	}
	s := splitCPU(from, to)
	if _, ok := s.Components[compContainerd]; ok {
		t.Errorf("containerd in the split: %v", s.Components)
	}
	// runSeconds counts ended threads in 10-ms ticks (the process's less its live
	// threads'), so over a few ms the agent's figure may be off by a tick or two.
	if s.Components[compAgent] < -0.02 || s.BusySeconds < s.Components[compAgent]-0.02 {
		t.Errorf("split %+v: the agent's CPU out of the machine's", s)
	}
}

// The deletion's table reads the rounds' deletion splits alone: a side whose rounds have
// only a start split is left out.
func TestWriteDeleteCPUTable(t *testing.T) {
	sides := splitSides()
	for name, s := range sides {
		if name == "kubelet" {
			continue
		}
		for i := range s.Rounds {
			s.Rounds[i].CPUDelete, s.Rounds[i].CPUStart = s.Rounds[i].CPUStart, nil
		}
		sides[name] = s
	}
	var b strings.Builder
	writeDeleteCPUTable(&b, sides)
	got := b.String()
	t.Logf("\n%s", got)
	for _, want := range []string{
		"CPU while the pods are deleted (delete request → nothing left; the floor: first CRI stop → last sandbox removed), medians over rounds:",
		"| component | nodeagent CPU s / share of machine capacity | floor CPU s / share of machine capacity |",
		"| kube-apiserver | 5 / 20.8 % | 0.5 / 5 % |",
		"nodeagent: the span lasted 12 s (median) on 2 cores.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(got, "kubelet CPU") {
		t.Error("the kubelet, with no deletion split, has a column")
	}
	var start strings.Builder
	writeCPUTable(&start, sides)
	if strings.Contains(start.String(), "nodeagent CPU") {
		t.Error("the start's table shows nodeagent's deletion split")
	}
}
