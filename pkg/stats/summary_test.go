package stats

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	fakeclock "k8s.io/utils/clock/testing"
)

// fakeCRI holds sandboxes, containers and their stats in memory. With
// noSandboxStats it answers ListPodSandboxStats as a runtime that lacks it.
type fakeCRI struct {
	mu             sync.Mutex
	sandboxes      []*runtimeapi.PodSandbox
	containers     []*runtimeapi.Container
	sandboxStats   []*runtimeapi.PodSandboxStats
	containerStats []*runtimeapi.ContainerStats
	noSandboxStats bool
	// sandboxStatsErr fails ListPodSandboxStats, as containerd does when
	// one sandbox cannot be read.
	sandboxStatsErr error
	imageFs         *runtimeapi.ImageFsInfoResponse
	calls           []string
}

func (f *fakeCRI) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeCRI) ListPodSandbox(_ context.Context, in *runtimeapi.ListPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	f.record("ListPodSandbox")
	var out []*runtimeapi.PodSandbox
	for _, sb := range f.sandboxes {
		if st := in.GetFilter().GetState(); st != nil && st.State != sb.State {
			continue
		}
		out = append(out, sb)
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func (f *fakeCRI) ListContainers(_ context.Context, in *runtimeapi.ListContainersRequest, _ ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	f.record("ListContainers")
	var out []*runtimeapi.Container
	for _, c := range f.containers {
		if st := in.GetFilter().GetState(); st != nil && st.State != c.State {
			continue
		}
		out = append(out, c)
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (f *fakeCRI) ListPodSandboxStats(context.Context, *runtimeapi.ListPodSandboxStatsRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f.record("ListPodSandboxStats")
	if f.noSandboxStats {
		return nil, status.Error(codes.Unimplemented, "not implemented")
	}
	if f.sandboxStatsErr != nil {
		return nil, f.sandboxStatsErr
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: f.sandboxStats}, nil
}

func (f *fakeCRI) ListContainerStats(context.Context, *runtimeapi.ListContainerStatsRequest, ...grpc.CallOption) (*runtimeapi.ListContainerStatsResponse, error) {
	f.record("ListContainerStats")
	return &runtimeapi.ListContainerStatsResponse{Stats: f.containerStats}, nil
}

func (f *fakeCRI) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest, ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error) {
	f.record("ImageFsInfo")
	return f.imageFs, nil
}

func u64(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }

// fixture is a node with two pods: default/web (u1, a container "app",
// an emptyDir and a PVC) and default/job (u2, a container "main", not
// among the agent's pods). Only web's pod cgroup exists.
type fixture struct {
	cri                      *fakeCRI
	clock                    *fakeclock.FakeClock
	mount, proc, root, logs  string
	imageFsDir               string
	created                  time.Time
	provider                 *Provider
	webCgroup                string
	webSandbox, webContainer string
}

func newFixture(t testing.TB, unified bool) *fixture {
	t.Helper()
	t0 := time.Unix(1_800_000_000, 0)
	f := &fixture{
		clock: fakeclock.NewFakeClock(t0), mount: t.TempDir(), proc: fakeProc(t), root: t.TempDir(), logs: t.TempDir(),
		imageFsDir: t.TempDir(), created: t0.Add(-time.Hour), webCgroup: "/kubepods/burstable/podu1",
		webSandbox: "sb-web", webContainer: "c-app",
	}
	f.writeCgroups(t, unified, 0)

	// Pod directories, volumes and logs of web.
	writeFile(t, filepath.Join(f.root, "pods", "u1", "volumes", "kubernetes.io~empty-dir", "cache", "data"), string(make([]byte, 10000)))
	writeFile(t, filepath.Join(f.root, "pods", "u1", "volumes", "kubernetes.io~csi", "data", "mount", "x"), string(make([]byte, 5000)))
	writeFile(t, filepath.Join(f.root, "pods", "u1", "etc-hosts"), "127.0.0.1 localhost\n")
	writeFile(t, filepath.Join(f.logs, "default_web_u1", "app", "0.log"), string(make([]byte, 20000)))

	md := func(name, uid string) *runtimeapi.PodSandboxMetadata {
		return &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid}
	}
	ns := func(d time.Duration) int64 { return f.created.Add(d).UnixNano() }
	f.cri = &fakeCRI{
		sandboxes: []*runtimeapi.PodSandbox{
			{Id: "sb-web-old", Metadata: md("web", "u1"), State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: ns(0)},
			{Id: f.webSandbox, Metadata: md("web", "u1"), State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: ns(time.Minute)},
			{Id: "sb-job", Metadata: md("job", "u2"), State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: ns(2 * time.Minute)},
		},
		containers: []*runtimeapi.Container{
			{Id: f.webContainer, PodSandboxId: f.webSandbox, State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: ns(90 * time.Second),
				Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: 1}, Labels: map[string]string{labelContainerName: "app"}},
			{Id: "c-app-dead", PodSandboxId: f.webSandbox, State: runtimeapi.ContainerState_CONTAINER_EXITED, CreatedAt: ns(80 * time.Second),
				Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Labels: map[string]string{labelContainerName: "app"}},
			{Id: "c-main", PodSandboxId: "sb-job", State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: ns(150 * time.Second),
				Metadata: &runtimeapi.ContainerMetadata{Name: "main"}, Labels: map[string]string{labelContainerName: "main"}},
		},
		imageFs: &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
			Timestamp: t0.UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: f.imageFsDir},
			UsedBytes: u64(123456), InodesUsed: u64(789),
		}}},
	}
	f.setContainerStats(0)
	pods := []*v1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"},
		Spec: v1.PodSpec{Volumes: []v1.Volume{
			{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-1"}}},
			{Name: "settings", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
		}},
	}}
	p, err := New(Config{
		NodeName: "node-1", Runtime: f.cri, Images: f.cri,
		Pods: func() []*v1.Pod { return pods },
		PodCgroup: func(pod *v1.Pod) (string, error) {
			return "/kubepods/burstable/pod" + string(pod.UID), nil
		},
		VolumeDirs: func(pod *v1.Pod) []VolumeDir {
			dir := filepath.Join(f.root, "pods", string(pod.UID), "volumes")
			return []VolumeDir{
				{Name: "cache", Plugin: "kubernetes.io/empty-dir", Path: filepath.Join(dir, "kubernetes.io~empty-dir", "cache")},
				{Name: "data", Plugin: "kubernetes.io/csi", Path: filepath.Join(dir, "kubernetes.io~csi", "data", "mount")},
				{Name: "settings", Plugin: "kubernetes.io/configmap", Path: filepath.Join(dir, "kubernetes.io~configmap", "settings")},
			}
		},
		RootDir: f.root, PodLogsDir: f.logs,
		SystemCgroups: SystemCgroups{Pods: "/kubepods"}, RuntimePID: 42, StartTime: t0.Add(-time.Minute),
		CgroupMount: f.mount, Unified: &unified, ProcRoot: f.proc, Clock: f.clock,
		Processes: func() (int64, error) { return 321, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.provider = p
	return f
}

// writeCgroups writes the cgroup tree as it is step seconds in, each
// cgroup using a known amount of CPU per second.
func (f *fixture) writeCgroups(t testing.TB, unified bool, step uint64) {
	t.Helper()
	type cg struct {
		path    string
		perSec  uint64 // nanocores
		current uint64
	}
	cgs := []cg{
		{"/", 1_500_000_000, 8 << 30},
		{"/kubepods", 600_000_000, 1 << 30},
		{f.webCgroup, 250_000_000, 300 << 20},
		{"/system.slice/nodeagent.service", 50_000_000, 60 << 20},
		{"/system.slice/containerd.service", 40_000_000, 90 << 20},
	}
	for _, c := range cgs {
		cpu := 1_000_000_000 + c.perSec*step
		if unified {
			if c.path == "/" {
				writeFile(t, filepath.Join(f.mount, "cpu.stat"), "usage_usec "+itoa(cpu/1000)+"\n")
				writeFile(t, filepath.Join(f.mount, "memory.stat"), "anon 100\ninactive_file 1000\npgfault 1\npgmajfault 0\n")
				continue
			}
			v2Cgroup(t, f.mount, c.path, cpu/1000, c.current, "max", 10<<20, 5<<20)
			continue
		}
		v1Cgroup(t, f.mount, c.path, cpu, c.current, 9223372036854771712, 10<<20, 5<<20)
	}
}

// setContainerStats sets the runtime's stats as they are step seconds in.
func (f *fixture) setContainerStats(step uint64) {
	now := f.created.Add(time.Hour + time.Duration(step)*time.Second).UnixNano()
	cstat := func(id, name string, cpu uint64, nanoCores *runtimeapi.UInt64Value) *runtimeapi.ContainerStats {
		return &runtimeapi.ContainerStats{
			Attributes: &runtimeapi.ContainerAttributes{Id: id, Metadata: &runtimeapi.ContainerMetadata{Name: name}},
			Cpu:        &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: u64(cpu), UsageNanoCores: nanoCores},
			Memory: &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: u64(100 << 20), UsageBytes: u64(120 << 20),
				RssBytes: u64(80 << 20), PageFaults: u64(11), MajorPageFaults: u64(1)},
			WritableLayer: &runtimeapi.FilesystemUsage{Timestamp: now, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: f.imageFsDir},
				UsedBytes: u64(4096), InodesUsed: u64(3)},
		}
	}
	app := cstat(f.webContainer, "app", 2_000_000_000+step*200_000_000, u64(200_000_000))
	dead := cstat("c-app-dead", "app", 5, nil)
	// The job's runtime gives no rate: it is measured here.
	main := cstat("c-main", "main", 1_000_000_000+step*100_000_000, nil)
	f.cri.containerStats = []*runtimeapi.ContainerStats{app, dead, main}
	f.cri.sandboxStats = []*runtimeapi.PodSandboxStats{
		{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: f.webSandbox, Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "u1"}},
			Linux: &runtimeapi.LinuxPodSandboxStats{
				Cpu:    &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: u64(2_100_000_000 + step*210_000_000), UsageNanoCores: u64(210_000_000)},
				Memory: &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: u64(110 << 20), UsageBytes: u64(130 << 20), AvailableBytes: u64(400 << 20)},
				Network: &runtimeapi.NetworkUsage{Timestamp: now,
					DefaultInterface: &runtimeapi.NetworkInterfaceUsage{Name: "eth0", RxBytes: u64(10), RxErrors: u64(0), TxBytes: u64(20), TxErrors: u64(0)},
					Interfaces:       []*runtimeapi.NetworkInterfaceUsage{{Name: "eth0", RxBytes: u64(10), RxErrors: u64(0), TxBytes: u64(20), TxErrors: u64(0)}}},
				Process:    &runtimeapi.ProcessUsage{Timestamp: now, ProcessCount: u64(3)},
				Containers: []*runtimeapi.ContainerStats{app, dead},
			},
		},
		{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb-job", Metadata: &runtimeapi.PodSandboxMetadata{Name: "job", Namespace: "default", Uid: "u2"}},
			Linux: &runtimeapi.LinuxPodSandboxStats{
				Cpu:        &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: u64(1_000_000_000 + step*100_000_000)},
				Memory:     &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: u64(50 << 20)},
				Containers: []*runtimeapi.ContainerStats{main},
			},
		},
	}
}

// advance moves the node ten seconds on.
func (f *fixture) advance(t *testing.T, unified bool) {
	t.Helper()
	f.clock.Step(10 * time.Second)
	f.writeCgroups(t, unified, 10)
	f.setContainerStats(10)
}

func podNamed(t *testing.T, s *statsapi.Summary, name string) statsapi.PodStats {
	t.Helper()
	for _, p := range s.Pods {
		if p.PodRef.Name == name {
			return p
		}
	}
	t.Fatalf("pod %s not in the summary: %+v", name, s.Pods)
	return statsapi.PodStats{}
}

func val(p *uint64) uint64 {
	if p == nil {
		return 1<<64 - 1
	}
	return *p
}

func TestSummaryFromSandboxStats(t *testing.T) {
	for _, unified := range []bool{false, true} {
		t.Run(map[bool]string{false: "cgroup v1", true: "cgroup v2"}[unified], func(t *testing.T) {
			f := newFixture(t, unified)
			ctx := context.Background()
			f.provider.housekeep(ctx)
			// A container's rate, when the runtime gives none, is measured
			// between requests.
			if _, err := f.provider.Summary(ctx, true); err != nil {
				t.Fatal(err)
			}
			f.advance(t, unified)
			s, err := f.provider.Summary(ctx, false)
			if err != nil {
				t.Fatal(err)
			}

			n := s.Node
			if n.NodeName != "node-1" || !n.StartTime.Equal(&metav1.Time{Time: time.Unix(1700000000, 0)}) {
				t.Errorf("node name %q start %v", n.NodeName, n.StartTime)
			}
			if val(n.CPU.UsageCoreNanoSeconds) != 16_000_000_000 || val(n.CPU.UsageNanoCores) != 1_500_000_000 || !n.CPU.Time.Equal(&metav1.Time{Time: f.clock.Now()}) {
				t.Errorf("node cpu = %d ns, %d nanocores at %v", val(n.CPU.UsageCoreNanoSeconds), val(n.CPU.UsageNanoCores), n.CPU.Time)
			}
			memTotal := uint64(16384000 * 1024)
			if ws := val(n.Memory.WorkingSetBytes); ws == 0 || val(n.Memory.AvailableBytes) != memTotal-ws {
				t.Errorf("node memory working set %d available %d, want available = MemTotal - working set", ws, val(n.Memory.AvailableBytes))
			}
			if n.Network == nil || n.Network.Name != "eth0" || val(n.Network.RxBytes) != 1000 || len(n.Network.Interfaces) != 2 {
				t.Errorf("node network = %+v, want eth0 on top and lo and veth left out", n.Network)
			}
			if n.Fs == nil || val(n.Fs.CapacityBytes) == 0 || n.Fs.AvailableBytes == nil || n.Fs.InodesFree == nil {
				t.Errorf("node fs = %+v", n.Fs)
			}
			img := n.Runtime.ImageFs
			if img == nil || val(img.UsedBytes) != 123456 || val(img.InodesUsed) != 789 || val(img.CapacityBytes) == 0 || n.Runtime.ContainerFs != img {
				t.Errorf("image fs = %+v, container fs %p", img, n.Runtime.ContainerFs)
			}
			if n.Rlimit == nil || *n.Rlimit.MaxPID != 120000 || *n.Rlimit.NumOfRunningProcesses != 321 {
				t.Errorf("rlimit = %+v", n.Rlimit)
			}
			sys := map[string]statsapi.ContainerStats{}
			for _, c := range n.SystemContainers {
				sys[c.Name] = c
			}
			if k := sys[statsapi.SystemContainerKubelet]; val(k.CPU.UsageNanoCores) != 50_000_000 || !k.StartTime.Equal(&metav1.Time{Time: f.clock.Now().Add(-10*time.Second - time.Minute)}) {
				t.Errorf("kubelet system container = %+v", k)
			}
			if r := sys[statsapi.SystemContainerRuntime]; val(r.CPU.UsageNanoCores) != 40_000_000 || val(r.Memory.UsageBytes) != 90<<20 {
				t.Errorf("runtime system container = %+v", r)
			}
			if p := sys[statsapi.SystemContainerPods]; val(p.CPU.UsageNanoCores) != 600_000_000 || val(p.Memory.UsageBytes) != 1<<30 {
				t.Errorf("pods system container = %+v", p)
			}

			if len(s.Pods) != 2 || s.Pods[0].PodRef.Name != "job" || s.Pods[1].PodRef.Name != "web" {
				t.Fatalf("pods = %+v, want job and web, once each", s.Pods)
			}
			web := podNamed(t, s, "web")
			if web.PodRef != (statsapi.PodReference{Name: "web", Namespace: "default", UID: "u1"}) || !web.StartTime.Equal(&metav1.Time{Time: f.created.Add(time.Minute)}) {
				t.Errorf("web ref %+v start %v, want the ready sandbox's creation", web.PodRef, web.StartTime)
			}
			if val(web.CPU.UsageNanoCores) != 210_000_000 || val(web.Memory.WorkingSetBytes) != 110<<20 || val(web.Memory.AvailableBytes) != 400<<20 {
				t.Errorf("web cpu %+v memory %+v, want the sandbox's", web.CPU, web.Memory)
			}
			if web.Network == nil || web.Network.Name != "eth0" || val(web.Network.TxBytes) != 20 || web.ProcessStats == nil || val(web.ProcessStats.ProcessCount) != 3 {
				t.Errorf("web network %+v process %+v", web.Network, web.ProcessStats)
			}
			if len(web.Containers) != 1 {
				t.Fatalf("web containers = %+v, want the running app only", web.Containers)
			}
			app := web.Containers[0]
			if app.Name != "app" || !app.StartTime.Equal(&metav1.Time{Time: f.created.Add(90 * time.Second)}) ||
				val(app.CPU.UsageNanoCores) != 200_000_000 || val(app.CPU.UsageCoreNanoSeconds) != 4_000_000_000 ||
				val(app.Memory.WorkingSetBytes) != 100<<20 || val(app.Memory.RSSBytes) != 80<<20 || val(app.Memory.PageFaults) != 11 {
				t.Errorf("app = %+v cpu %+v memory %+v", app, app.CPU, app.Memory)
			}
			if app.Rootfs == nil || val(app.Rootfs.UsedBytes) != 4096 || val(app.Rootfs.InodesUsed) != 3 || val(app.Rootfs.CapacityBytes) == 0 {
				t.Errorf("app rootfs = %+v", app.Rootfs)
			}
			if app.Logs == nil || val(app.Logs.UsedBytes) < 20000 || val(app.Logs.InodesUsed) != 1 {
				t.Errorf("app logs = %+v", app.Logs)
			}
			vols := map[string]statsapi.VolumeStats{}
			for _, v := range web.VolumeStats {
				vols[v.Name] = v
			}
			if len(vols) != 2 || val(vols["cache"].UsedBytes) < 10000 || vols["cache"].PVCRef != nil ||
				vols["data"].PVCRef == nil || vols["data"].PVCRef.Name != "claim-1" || val(vols["cache"].CapacityBytes) == 0 {
				t.Errorf("volumes = %+v, want cache and data (a PVC), settings not set up", web.VolumeStats)
			}
			hosts, err := diskUsage(filepath.Join(f.root, "pods", "u1", "etc-hosts"))
			if err != nil {
				t.Fatal(err)
			}
			wantEph := val(app.Rootfs.UsedBytes) + val(app.Logs.UsedBytes) + val(vols["cache"].UsedBytes) + hosts.bytes
			if web.EphemeralStorage == nil || val(web.EphemeralStorage.UsedBytes) != wantEph || val(web.EphemeralStorage.CapacityBytes) == 0 {
				t.Errorf("ephemeral storage = %+v, want %d used: rootfs, logs, the emptyDir and etc-hosts, not the PVC", web.EphemeralStorage, wantEph)
			}
			job := podNamed(t, s, "job")
			if len(job.Containers) != 1 || val(job.Containers[0].CPU.UsageNanoCores) != 100_000_000 {
				t.Errorf("job containers = %+v, want main with a rate measured here", job.Containers)
			}
		})
	}
}

func TestSummaryOnlyCPUAndMemory(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	s, err := f.provider.Summary(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node
	if n.CPU == nil || n.Memory == nil || n.Network != nil || n.Fs != nil || n.Runtime != nil || n.Rlimit != nil {
		t.Errorf("node = %+v, want cpu and memory only", n)
	}
	if n.CPU.UsageNanoCores != nil {
		t.Errorf("first reading has a rate %d", *n.CPU.UsageNanoCores)
	}
	web := podNamed(t, s, "web")
	if web.CPU == nil || web.Memory == nil || web.Network != nil || web.VolumeStats != nil || web.EphemeralStorage != nil {
		t.Errorf("web = %+v, want cpu and memory only", web)
	}
	if c := web.Containers[0]; c.CPU == nil || c.Memory == nil || c.Rootfs != nil || c.Logs != nil {
		t.Errorf("app = %+v, want cpu and memory only", c)
	}
	for _, call := range f.cri.calls {
		if call == "ImageFsInfo" {
			t.Errorf("the cpu-and-memory summary asked for the image filesystem")
		}
	}
}

func TestNodeSummaryHoldsWhatTheSignalsRead(t *testing.T) {
	f := newFixture(t, false)
	s, err := f.provider.NodeSummary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node
	if n.Memory == nil || n.Fs == nil || n.Runtime == nil || n.Runtime.ImageFs == nil || n.Rlimit == nil {
		t.Errorf("node = %+v, want memory, filesystems and process limits", n)
	}
	if len(n.SystemContainers) != 1 || n.SystemContainers[0].Name != statsapi.SystemContainerPods || n.SystemContainers[0].Memory == nil {
		t.Errorf("system containers = %+v, want the pods' alone", n.SystemContainers)
	}
	if n.Network != nil || len(s.Pods) != 0 {
		t.Errorf("network %+v, %d pods; want neither", n.Network, len(s.Pods))
	}
}

// The eviction signals' view asks the runtime where its filesystems are once a minute, and
// stats them at every pass; the full Summary asks it every time. The process limit is read
// once a minute.
func TestNodeSummaryReusesTheRuntimesFilesystemsAndPIDLimit(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	asked := func() int {
		f.cri.mu.Lock()
		defer f.cri.mu.Unlock()
		n := 0
		for _, c := range f.cri.calls {
			if c == "ImageFsInfo" {
				n++
			}
		}
		return n
	}
	for i := range 3 {
		s, err := f.provider.NodeSummary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rt := s.Node.Runtime; rt == nil || rt.ImageFs == nil || rt.ImageFs.AvailableBytes == nil || rt.ImageFs.InodesFree == nil {
			t.Fatalf("pass %d: runtime filesystems %+v, want the image filesystem's free space and inodes", i, rt)
		}
		f.clock.Step(15 * time.Second)
	}
	if n := asked(); n != 1 {
		t.Errorf("ImageFsInfo asked %d times in 3 passes within a minute, want once", n)
	}
	// The kernel's process limit too is read once a minute.
	writeFile(t, filepath.Join(f.proc, "sys", "kernel", "threads-max"), "90000\n")
	if s, err := f.provider.NodeSummary(ctx); err != nil || *s.Node.Rlimit.MaxPID != 120000 {
		t.Errorf("max PID read again within a minute: %v", err)
	}
	f.clock.Step(16 * time.Second) // 61 s since both were read
	s, err := f.provider.NodeSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := asked(); n != 2 {
		t.Errorf("ImageFsInfo asked %d times, want again once a minute has passed", n)
	}
	if got := *s.Node.Rlimit.MaxPID; got != 90000 {
		t.Errorf("max PID %d a minute on, want the new threads-max 90000", got)
	}
	if _, err := f.provider.Summary(ctx, false); err != nil {
		t.Fatal(err)
	}
	if n := asked(); n != 3 {
		t.Errorf("ImageFsInfo asked %d times, want the full summary to ask", n)
	}
}

func TestSummaryWithoutSandboxStats(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mutate func(*fakeCRI)
	}{
		{"unimplemented", func(f *fakeCRI) { f.noSandboxStats = true }},
		{"failing", func(f *fakeCRI) {
			f.sandboxStatsErr = status.Error(codes.Unknown, "failed to decode sandbox container metrics")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { testSummaryWithoutSandboxStats(t, tt.mutate) })
	}
}

func testSummaryWithoutSandboxStats(t *testing.T, mutate func(*fakeCRI)) {
	f := newFixture(t, false)
	mutate(f.cri)
	ctx := context.Background()
	f.provider.housekeep(ctx)
	if _, err := f.provider.Summary(ctx, true); err != nil {
		t.Fatal(err)
	}
	f.advance(t, false)
	s, err := f.provider.Summary(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	web := podNamed(t, s, "web")
	// The pod cgroup: 250m over the last ten seconds.
	if val(web.CPU.UsageNanoCores) != 250_000_000 || val(web.CPU.UsageCoreNanoSeconds) != 3_500_000_000 || val(web.Memory.UsageBytes) != 300<<20 {
		t.Errorf("web cpu %+v memory %+v, want the pod cgroup's", web.CPU, web.Memory)
	}
	if len(web.Containers) != 1 || web.Containers[0].Name != "app" || web.Network != nil {
		t.Errorf("web containers %+v network %+v", web.Containers, web.Network)
	}
	// job is not among the agent's pods: the sum of its containers.
	job := podNamed(t, s, "job")
	if val(job.CPU.UsageCoreNanoSeconds) != 2_000_000_000 || val(job.CPU.UsageNanoCores) != 100_000_000 || val(job.Memory.WorkingSetBytes) != 100<<20 {
		t.Errorf("job cpu %+v memory %+v, want its container's", job.CPU, job.Memory)
	}
}

func TestSummaryFailsWithoutRootCgroup(t *testing.T) {
	f := newFixture(t, false)
	if err := os.RemoveAll(filepath.Join(f.mount, "memory")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.provider.Summary(context.Background(), true); err == nil {
		t.Error("summary without a root cgroup succeeded")
	}
}

func TestVolumesMeasuredAgainOnceSetUp(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	f.provider.housekeep(ctx)
	if got := len(f.provider.volumes.get("u1")); got != 2 {
		t.Fatalf("volumes = %d, want cache and data", got)
	}
	// The configMap volume gets set up: measured at the next round, not a
	// period later.
	writeFile(t, filepath.Join(f.root, "pods", "u1", "volumes", "kubernetes.io~configmap", "settings", "key"), "value")
	f.clock.Step(10 * time.Second)
	f.provider.housekeep(ctx)
	if got := len(f.provider.volumes.get("u1")); got != 3 {
		t.Fatalf("volumes = %d after the configMap was set up, want 3", got)
	}
	// All set up: the next measurement waits for the period.
	writeFile(t, filepath.Join(f.root, "pods", "u1", "volumes", "kubernetes.io~empty-dir", "cache", "more"), string(make([]byte, 100000)))
	before := f.provider.volumes.get("u1")
	f.clock.Step(10 * time.Second)
	f.provider.housekeep(ctx)
	if after := f.provider.volumes.get("u1"); val(after[0].stats.UsedBytes) != val(before[0].stats.UsedBytes) {
		t.Errorf("measured again before the period: %d then %d", val(before[0].stats.UsedBytes), val(after[0].stats.UsedBytes))
	}
	f.clock.Step(time.Minute)
	f.provider.housekeep(ctx)
	if after := f.provider.volumes.get("u1"); val(after[0].stats.UsedBytes) <= val(before[0].stats.UsedBytes) {
		t.Errorf("not measured again after the period: %d then %d", val(before[0].stats.UsedBytes), val(after[0].stats.UsedBytes))
	}
}

func TestVolumeCacheForgetsPods(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	f.provider.housekeep(ctx)
	if len(f.provider.volumes.get(types.UID("u1"))) == 0 {
		t.Fatal("volumes of u1 not measured")
	}
	f.provider.volumes.refresh(ctx, nil, f.provider.cfg.VolumeDirs, time.Minute, f.clock, noMetrics{})
	if got := f.provider.volumes.get("u1"); got != nil {
		t.Errorf("volumes of a pod gone: %+v", got)
	}
}

// The eviction manager's Summary every 10 s reads the cgroups the
// housekeeping would: what a Summary read within the interval is not read
// again.
func TestHousekeepingSkipsWhatASummaryJustRead(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	if _, err := f.provider.Summary(ctx, false); err != nil {
		t.Fatal(err)
	}
	read := f.clock.Now()
	f.clock.Step(time.Second)
	f.provider.housekeep(ctx)
	if !f.provider.rates.seenSince(rootKey, read.Add(-time.Nanosecond)) || f.provider.rates.seenSince(rootKey, read) {
		t.Error("the root cgroup read again a second after a Summary read it")
	}
	f.clock.Step(10 * time.Second)
	f.provider.housekeep(ctx)
	if !f.provider.rates.seenSince(rootKey, read) {
		t.Error("the root cgroup not read an interval after the last Summary")
	}
}
