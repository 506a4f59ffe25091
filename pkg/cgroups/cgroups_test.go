package cgroups

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func rl(kv ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func pod(uid string, rs ...v1.ResourceRequirements) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, UID: types.UID(uid)}}
	for i, r := range rs {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: string(rune('a' + i)), Resources: r})
	}
	return p
}

var (
	guaranteed = v1.ResourceRequirements{Requests: rl("cpu", "500m", "memory", "128Mi"), Limits: rl("cpu", "500m", "memory", "128Mi")}
	burstable  = v1.ResourceRequirements{Requests: rl("cpu", "250m", "memory", "64Mi"), Limits: rl("memory", "256Mi")}
	besteffort = v1.ResourceRequirements{}
)

func TestNames(t *testing.T) {
	tests := []struct {
		name, root, driver string
		class              v1.PodQOSClass
		want               string
	}{
		{"cgroupfs guaranteed", "/", DriverCgroupfs, v1.PodQOSGuaranteed, "/kubepods/pod1234-ab"},
		{"cgroupfs burstable under a root", "/nodeagent-harness", DriverCgroupfs, v1.PodQOSBurstable, "/nodeagent-harness/kubepods/burstable/pod1234-ab"},
		{"cgroupfs besteffort, empty root", "", DriverCgroupfs, v1.PodQOSBestEffort, "/kubepods/besteffort/pod1234-ab"},
		{"systemd guaranteed", "/", DriverSystemd, v1.PodQOSGuaranteed, "/kubepods.slice/kubepods-pod1234_ab.slice"},
		{"systemd burstable", "/", DriverSystemd, v1.PodQOSBurstable, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_ab.slice"},
		{"systemd besteffort", "", DriverSystemd, v1.PodQOSBestEffort, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_ab.slice"},
		{"systemd under a slice", "/system.slice/system-agent.slice", DriverSystemd, v1.PodQOSBurstable,
			"/system.slice/system-agent.slice/system-agent-kubepods.slice/system-agent-kubepods-burstable.slice/system-agent-kubepods-burstable-pod1234_ab.slice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent, err := qosParent(rootName(tt.root, tt.driver).child(kubepodsName), tt.class)
			if err != nil {
				t.Fatal(err)
			}
			if got := parent.child(podCgroupName("1234-ab")).path(tt.driver); got != tt.want {
				t.Errorf("path = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPodResources(t *testing.T) {
	opts := PodOptions{CPUCFSQuota: true, PodPidsLimit: 1024}
	u := func(v uint64) *uint64 { return &v }
	i := func(v int64) *int64 { return &v }
	tests := []struct {
		name   string
		pod    *v1.Pod
		mutate func(*v1.Pod)
		opts   func(*PodOptions)
		want   Resources
	}{
		{name: "guaranteed", pod: pod("g", guaranteed, guaranteed),
			want: Resources{CPUShares: u(1024), CPUQuota: i(100000), CPUPeriod: u(100000), Memory: i(256 << 20), PidsLimit: i(1024)}},
		{name: "burstable with memory limits only", pod: pod("b", burstable),
			want: Resources{CPUShares: u(256), Memory: i(256 << 20), PidsLimit: i(1024)}},
		{name: "burstable, one container without a memory limit", pod: pod("b", burstable, v1.ResourceRequirements{Requests: rl("cpu", "100m")}),
			want: Resources{CPUShares: u(358), PidsLimit: i(1024)}},
		{name: "burstable with cpu limits everywhere", pod: pod("b", v1.ResourceRequirements{Requests: rl("cpu", "100m"), Limits: rl("cpu", "300m")}),
			want: Resources{CPUShares: u(102), CPUQuota: i(30000), CPUPeriod: u(100000), PidsLimit: i(1024)}},
		{name: "besteffort", pod: pod("e", besteffort),
			want: Resources{CPUShares: u(2), PidsLimit: i(1024)}},
		{name: "quota off is unlimited", pod: pod("g", guaranteed), opts: func(o *PodOptions) { o.CPUCFSQuota = false; o.PodPidsLimit = 0 },
			want: Resources{CPUShares: u(512), CPUQuota: i(-1), CPUPeriod: u(100000), Memory: i(128 << 20)}},
		{name: "custom period", pod: pod("g", guaranteed), opts: func(o *PodOptions) { o.CPUCFSQuotaPeriod = 10 * time.Millisecond },
			want: Resources{CPUShares: u(512), CPUQuota: i(5000), CPUPeriod: u(10000), Memory: i(128 << 20), PidsLimit: i(1024)}},
		{name: "init container peak counts", pod: pod("g", guaranteed), mutate: func(p *v1.Pod) {
			big := v1.ResourceRequirements{Requests: rl("cpu", "2", "memory", "1Gi"), Limits: rl("cpu", "2", "memory", "1Gi")}
			p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: big}}
		}, want: Resources{CPUShares: u(2048), CPUQuota: i(200000), CPUPeriod: u(100000), Memory: i(1 << 30), PidsLimit: i(1024)}},
		{name: "pod-level resources", pod: pod("b", besteffort), mutate: func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Requests: rl("cpu", "1"), Limits: rl("cpu", "2", "memory", "1Gi")}
		}, want: Resources{CPUShares: u(1024), CPUQuota: i(200000), CPUPeriod: u(100000), Memory: i(1 << 30), PidsLimit: i(1024)}},
		{name: "huge pages", pod: pod("g", v1.ResourceRequirements{Requests: rl("cpu", "1", "memory", "1Gi", "hugepages-2Mi", "4Mi"),
			Limits: rl("cpu", "1", "memory", "1Gi", "hugepages-2Mi", "4Mi")}),
			want: Resources{CPUShares: u(1024), CPUQuota: i(100000), CPUPeriod: u(100000), Memory: i(1 << 30), PidsLimit: i(1024),
				HugePages: map[string]int64{"2MB": 4 << 20}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.mutate != nil {
				tt.mutate(tt.pod)
			}
			o := opts
			if tt.opts != nil {
				tt.opts(&o)
			}
			if got := PodResources(tt.pod, o); !equalResources(got, tt.want) {
				t.Errorf("PodResources =\n %s\nwant\n %s", describe(got), describe(tt.want))
			}
		})
	}
}

func equalResources(a, b Resources) bool { return describe(a) == describe(b) }

func describe(r Resources) string {
	var b strings.Builder
	pu := func(n string, v *uint64) {
		if v != nil {
			b.WriteString(n + "=" + itoa(int64(*v)) + " ")
		}
	}
	pi := func(n string, v *int64) {
		if v != nil {
			b.WriteString(n + "=" + itoa(*v) + " ")
		}
	}
	pu("shares", r.CPUShares)
	pi("quota", r.CPUQuota)
	pu("period", r.CPUPeriod)
	pi("memory", r.Memory)
	pi("pids", r.PidsLimit)
	for _, s := range sortedSizes(r.HugePages) {
		b.WriteString("hugetlb." + s + "=" + itoa(r.HugePages[s]) + " ")
	}
	return b.String()
}

func itoa(v int64) string { return resource.NewQuantity(v, resource.DecimalSI).String() }

func TestNodeResources(t *testing.T) {
	got := NodeResources(rl("cpu", "1900m", "memory", "3Gi", "pods", "110", "hugepages-2Mi", "0"))
	want := "shares=1945 memory=3221225472 hugetlb.2MB=0 "
	if describe(got) != want {
		t.Errorf("NodeResources = %s, want %s", describe(got), want)
	}
}

// fakeRmdir removes a directory of a fake tree as the kernel removes a
// cgroup: its interface files go with it, a child cgroup keeps it busy.
func fakeRmdir(p string) error {
	entries, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			return syscall.EBUSY
		}
	}
	return os.RemoveAll(p)
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// v1Tree lays out a hybrid cgroup v1 host like this one: a mount per
// controller, name=systemd and the unified tree beside them.
func v1Tree(t *testing.T) string {
	mnt := t.TempDir()
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids", "blkio", "devices", "freezer", "systemd", "unified"} {
		if err := os.MkdirAll(filepath.Join(mnt, c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(mnt, "cpuset", "cpuset.cpus"), "0-1\n")
	write(t, filepath.Join(mnt, "cpuset", "cpuset.mems"), "0\n")
	return mnt
}

func newV1(t *testing.T, mnt, driver string) (*Manager, *[]int) {
	t.Helper()
	unified := false
	var killed []int
	m, err := New(Config{Root: "/agent", Driver: driver, Mount: mnt, Unified: &unified,
		Pod: PodOptions{CPUCFSQuota: true, PodPidsLimit: 100}, NodeLimits: rl("cpu", "1900m", "memory", "3Gi"),
		Kill: func(pid int) error { killed = append(killed, pid); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	m.fs = legacyFS{mount: mnt, rmdir: fakeRmdir}
	return m, &killed
}

func TestV1Hierarchy(t *testing.T) {
	ctx := context.Background()
	mnt := v1Tree(t)
	m, killed := newV1(t, mnt, DriverCgroupfs)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	kp := filepath.Join(mnt, "%s", "agent", "kubepods")
	at := func(ctl, rel string) string { return filepath.Join(strings.Replace(kp, "%s", ctl, 1), rel) }
	if got := read(t, at("cpu", "cpu.shares")); got != "1945" {
		t.Errorf("kubepods cpu.shares = %s, want 1945", got)
	}
	if got := read(t, at("memory", "memory.limit_in_bytes")); got != "3221225472" {
		t.Errorf("kubepods memory limit = %s", got)
	}
	for _, c := range []string{"burstable", "besteffort"} {
		if got := read(t, at("cpu", c+"/cpu.shares")); got != "2" {
			t.Errorf("%s cpu.shares = %s, want 2", c, got)
		}
	}
	if got := read(t, at("cpuset", "burstable/cpuset.cpus")); got != "0-1" {
		t.Errorf("cpuset.cpus not copied down: %q", got)
	}

	g, b1, b2, e := pod("g", guaranteed), pod("b1", burstable), pod("b2", burstable), pod("e", besteffort)
	for _, p := range []*v1.Pod{g, b1, b2, e} {
		if _, err := m.EnsurePod(ctx, p); err != nil {
			t.Fatalf("EnsurePod(%s): %v", p.UID, err)
		}
	}
	for _, tt := range []struct{ file, want string }{
		{at("cpu", "podg/cpu.shares"), "512"},
		{at("cpu", "podg/cpu.cfs_quota_us"), "50000"},
		{at("cpu", "podg/cpu.cfs_period_us"), "100000"},
		{at("memory", "podg/memory.limit_in_bytes"), "134217728"},
		{at("pids", "podg/pids.max"), "100"},
		{at("cpu", "burstable/podb1/cpu.shares"), "256"},
		{at("memory", "burstable/podb1/memory.limit_in_bytes"), "268435456"},
		{at("cpu", "besteffort/pode/cpu.shares"), "2"},
		{at("cpu", "burstable/cpu.shares"), "512"},
		{at("cpu", "besteffort/cpu.shares"), "2"},
	} {
		if got := read(t, tt.file); got != tt.want {
			t.Errorf("%s = %s, want %s", strings.TrimPrefix(tt.file, mnt), got, tt.want)
		}
	}
	if _, err := os.Stat(at("cpu", "burstable/podb1/cpu.cfs_quota_us")); err == nil {
		t.Errorf("a burstable pod without cpu limits got a quota")
	}
	for _, ctl := range []string{"systemd", "unified", "freezer"} {
		if _, err := os.Stat(at(ctl, "podg")); err != nil {
			t.Errorf("pod cgroup missing in %s: %v", ctl, err)
		}
	}
	uids, err := m.PodUIDs()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(uids)
	if want := []types.UID{"b1", "b2", "e", "g"}; !slices.Equal(uids, want) {
		t.Errorf("PodUIDs = %v, want %v", uids, want)
	}
	for _, uid := range uids {
		if !m.HasPod(uid) {
			t.Errorf("HasPod(%s) false, PodUIDs has it", uid)
		}
	}
	if m.HasPod("nope") {
		t.Error("HasPod of a pod without a cgroup")
	}

	// A container cgroup the runtime left, and a process still in it.
	write(t, at("memory", "burstable/podb1/ctr/cgroup.procs"), "4242\n")
	if err := m.RemovePod(ctx, "b1"); !errors.Is(err, ErrBusy) {
		t.Fatalf("RemovePod with a process = %v, want ErrBusy", err)
	}
	if !slices.Equal(*killed, []int{4242}) {
		t.Errorf("killed %v, want [4242]", *killed)
	}
	write(t, at("memory", "burstable/podb1/ctr/cgroup.procs"), "")
	if err := m.RemovePod(ctx, "b1"); err != nil {
		t.Fatalf("RemovePod: %v", err)
	}
	for _, ctl := range []string{"cpu", "memory", "systemd", "unified", "cpuset"} {
		if _, err := os.Stat(at(ctl, "burstable/podb1")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pod cgroup left in %s: %v", ctl, err)
		}
	}
	if got := read(t, at("cpu", "burstable/cpu.shares")); got != "256" {
		t.Errorf("burstable cpu.shares after removal = %s, want 256", got)
	}
	if err := m.RemovePod(ctx, "b1"); err != nil {
		t.Errorf("removing a removed pod: %v", err)
	}
	for _, uid := range []types.UID{"g", "b2", "e"} {
		if err := m.RemovePod(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(t, at("cpu", "burstable/cpu.shares")); got != "2" {
		t.Errorf("burstable cpu.shares with no pods = %s, want 2", got)
	}
}

func TestEnsurePodRecreatesAMissingCgroup(t *testing.T) {
	ctx := context.Background()
	mnt := v1Tree(t)
	m, _ := newV1(t, mnt, DriverCgroupfs)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := m.EnsurePod(ctx, pod("g", guaranteed))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.fs.remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := m.EnsurePod(ctx, pod("g", guaranteed)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(mnt, "memory", p, "memory.limit_in_bytes")); got != "134217728" {
		t.Errorf("recreated memory limit = %s", got)
	}
}

func TestV1Systemd(t *testing.T) {
	ctx := context.Background()
	mnt := v1Tree(t)
	m, _ := newV1(t, mnt, DriverSystemd)
	m.kubepods = rootName("/", DriverSystemd).child(kubepodsName)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := m.EnsurePod(ctx, pod("12-34", burstable))
	if err != nil {
		t.Fatal(err)
	}
	if want := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice"; p != want {
		t.Errorf("pod cgroup = %s, want %s", p, want)
	}
	if got := read(t, filepath.Join(mnt, "cpu", p, "cpu.shares")); got != "256" {
		t.Errorf("cpu.shares = %s", got)
	}
	uids, err := m.PodUIDs()
	if err != nil || !slices.Equal(uids, []types.UID{"12-34"}) {
		t.Errorf("PodUIDs = %v, %v", uids, err)
	}
	if !m.HasPod("12-34") || m.HasPod("12-35") {
		t.Error("HasPod under the systemd driver: the slice's name is not read back")
	}
	if err := m.RemovePod(ctx, "12-34"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "cpu", p)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("systemd pod cgroup left: %v", err)
	}
}

func TestV2Hierarchy(t *testing.T) {
	ctx := context.Background()
	mnt := t.TempDir()
	write(t, filepath.Join(mnt, "cgroup.controllers"), "cpuset cpu io memory hugetlb pids rdma misc\n")
	write(t, filepath.Join(mnt, "cgroup.subtree_control"), "cpu memory\n")
	m, err := New(Config{Root: "/agent", Mount: mnt, Pod: PodOptions{CPUCFSQuota: true, PodPidsLimit: 100},
		NodeLimits: rl("cpu", "2", "memory", "4Gi"), Kill: func(int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.fs.(unifiedFS); !ok {
		t.Fatalf("a tree with cgroup.controllers was not detected as v2: %T", m.fs)
	}
	m.fs = unifiedFS{mount: mnt, rmdir: fakeRmdir}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := m.EnsurePod(ctx, pod("g", guaranteed))
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.EnsurePod(ctx, pod("b", burstable))
	if err != nil {
		t.Fatal(err)
	}
	e, err := m.EnsurePod(ctx, pod("e", besteffort))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ file, want string }{
		{"agent/cgroup.subtree_control", "+cpuset +cpu +io +memory +hugetlb +pids"},
		{"agent/kubepods/cgroup.subtree_control", "+cpuset +cpu +io +memory +hugetlb +pids"},
		{"agent/kubepods/cpu.weight", "174"},
		{"agent/kubepods/memory.max", "4294967296"},
		{"agent/kubepods/burstable/cpu.weight", "35"},
		{"agent/kubepods/besteffort/cpu.weight", "1"},
		{g + "/cpu.weight", "59"},
		{g + "/cpu.max", "50000 100000"},
		{g + "/memory.max", "134217728"},
		{g + "/pids.max", "100"},
		{b + "/cpu.weight", "35"},
		{b + "/memory.max", "268435456"},
		{e + "/cpu.weight", "1"},
	} {
		if got := read(t, filepath.Join(mnt, tt.file)); got != tt.want {
			t.Errorf("%s = %q, want %q", tt.file, got, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(mnt, b, "cpu.max")); err == nil {
		t.Errorf("a burstable pod without cpu limits got cpu.max")
	}
	for _, uid := range []types.UID{"g", "b", "e"} {
		if err := m.RemovePod(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{g, b, e} {
		if _, err := os.Stat(filepath.Join(mnt, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
}

func TestEnforceReserved(t *testing.T) {
	ctx := context.Background()
	mnt := v1Tree(t)
	m, _ := newV1(t, mnt, DriverCgroupfs)
	if err := m.EnforceReserved(ctx, "/system.slice", rl("cpu", "500m", "memory", "1Gi"), false); err == nil {
		t.Fatal("a missing reserved cgroup was accepted")
	}
	for _, c := range []string{"cpu", "memory", "pids"} {
		if err := os.MkdirAll(filepath.Join(mnt, c, "system.slice"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.EnforceReserved(ctx, "/system.slice", rl("cpu", "500m", "memory", "1Gi", "pid", "1000"), false); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ file, want string }{
		{"cpu/system.slice/cpu.shares", "512"},
		{"memory/system.slice/memory.limit_in_bytes", "1073741824"},
		{"pids/system.slice/pids.max", "1000"},
	} {
		if got := read(t, filepath.Join(mnt, tt.file)); got != tt.want {
			t.Errorf("%s = %s, want %s", tt.file, got, tt.want)
		}
	}
	if err := os.MkdirAll(filepath.Join(mnt, "cpu", "kube"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(mnt, "memory", "kube"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := m.EnforceReserved(ctx, "/kube", rl("cpu", "1", "memory", "1Gi"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "memory", "kube", "memory.limit_in_bytes")); err == nil {
		t.Error("compressible-only enforcement limited memory")
	}
	if got := read(t, filepath.Join(mnt, "cpu", "kube", "cpu.shares")); got != "1024" {
		t.Errorf("kube cpu.shares = %s", got)
	}
}

func TestV2Systemd(t *testing.T) {
	ctx := context.Background()
	mnt := t.TempDir()
	write(t, filepath.Join(mnt, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	m, err := New(Config{Driver: DriverSystemd, Mount: mnt, Pod: PodOptions{CPUCFSQuota: true},
		NodeLimits: rl("cpu", "2", "memory", "4Gi"), Kill: func(int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	m.fs = unifiedFS{mount: mnt, rmdir: fakeRmdir}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := m.EnsurePod(ctx, pod("ab-cd", guaranteed))
	if err != nil {
		t.Fatal(err)
	}
	if want := "/kubepods.slice/kubepods-podab_cd.slice"; p != want {
		t.Errorf("pod cgroup = %s, want %s", p, want)
	}
	for _, tt := range []struct{ file, want string }{
		{"kubepods.slice/memory.max", "4294967296"},
		{"kubepods.slice/kubepods-besteffort.slice/cpu.weight", "1"},
		{"kubepods.slice/kubepods-podab_cd.slice/cpu.max", "50000 100000"},
		{"kubepods.slice/kubepods-podab_cd.slice/memory.max", "134217728"},
		{"kubepods.slice/cgroup.subtree_control", "+cpuset +cpu +io +memory +pids"},
	} {
		if got := read(t, filepath.Join(mnt, tt.file)); got != tt.want {
			t.Errorf("%s = %q, want %q", tt.file, got, tt.want)
		}
	}
	uids, err := m.PodUIDs()
	if err != nil || !slices.Equal(uids, []types.UID{"ab-cd"}) {
		t.Errorf("PodUIDs = %v, %v", uids, err)
	}
	if !m.HasPod("ab-cd") {
		t.Error("HasPod under cgroup v2 false")
	}
	if err := m.RemovePod(ctx, "ab-cd"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, p)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod slice left: %v", err)
	}
}

// startedV1 is a started cgroupfs manager on a fake v1 tree, and the
// tree's mount.
func startedV1(t *testing.T) (*Manager, string) {
	t.Helper()
	mnt := v1Tree(t)
	m, _ := newV1(t, mnt, DriverCgroupfs)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, mnt
}

// res asks for the same cpu and memory as requests and limits (Guaranteed).
func res(cpu, mem string) v1.ResourceRequirements {
	l := rl("cpu", cpu, "memory", mem)
	return v1.ResourceRequirements{Requests: l, Limits: l}
}

// A resized pod's cgroup is only raised by EnsurePod (before its
// containers are resized) and lowered by SettlePod (after).
func TestResizedPodCgroupRaisedFirstLoweredLast(t *testing.T) {
	ctx := context.Background()
	m, mnt := startedV1(t)
	p, err := m.EnsurePod(ctx, pod("g", res("1", "128Mi")))
	if err != nil {
		t.Fatal(err)
	}
	cpu := func(f string) string { return read(t, filepath.Join(mnt, "cpu", p, f)) }
	mem := func() string { return read(t, filepath.Join(mnt, "memory", p, "memory.limit_in_bytes")) }

	// More cpu, less memory: cpu goes up at once, memory waits.
	resized := pod("g", res("2", "64Mi"))
	if _, err := m.EnsurePod(ctx, resized); err != nil {
		t.Fatal(err)
	}
	if cpu("cpu.cfs_quota_us") != "200000" || cpu("cpu.shares") != "2048" || mem() != "134217728" {
		t.Errorf("while resizing: quota %s shares %s memory %s, want 200000 2048 134217728",
			cpu("cpu.cfs_quota_us"), cpu("cpu.shares"), mem())
	}
	if err := m.SettlePod(ctx, resized); err != nil {
		t.Fatal(err)
	}
	if cpu("cpu.cfs_quota_us") != "200000" || mem() != "67108864" {
		t.Errorf("settled: quota %s memory %s, want 200000 67108864", cpu("cpu.cfs_quota_us"), mem())
	}
	// Settled and unchanged: nothing is written again.
	write(t, filepath.Join(mnt, "memory", p, "memory.limit_in_bytes"), "1")
	if _, err := m.EnsurePod(ctx, resized); err != nil {
		t.Fatal(err)
	}
	if err := m.SettlePod(ctx, resized); err != nil {
		t.Fatal(err)
	}
	if mem() != "1" {
		t.Errorf("an unchanged pod's cgroup was written again")
	}
}

func TestPodReadyWhenEnsurePodWouldDoNothing(t *testing.T) {
	ctx := context.Background()
	m, _ := startedV1(t)
	g := pod("g", res("1", "128Mi"))
	if _, ok := m.PodReady(g); ok {
		t.Fatal("ready before EnsurePod")
	}
	p, err := m.EnsurePod(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := m.PodReady(g); !ok || got != p {
		t.Fatalf("PodReady = %q, %v after EnsurePod, want %q, true", got, ok, p)
	}
	// Asking less while resized: EnsurePod keeps the wider limits, so ready.
	if _, ok := m.PodReady(pod("g", res("1", "64Mi"))); !ok {
		t.Error("a pod asking less memory is not ready, though EnsurePod only widens")
	}
	if _, ok := m.PodReady(pod("g", res("2", "128Mi"))); ok {
		t.Error("a pod asking more cpu is ready")
	}
	if err := m.fs.remove(p); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.PodReady(g); ok {
		t.Error("ready after its cgroup was removed")
	}
}
