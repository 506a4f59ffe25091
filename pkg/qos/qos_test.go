package qos

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// rl builds a resource list from name/quantity pairs.
func rl(kv ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func res(req, lim v1.ResourceList) v1.ResourceRequirements {
	return v1.ResourceRequirements{Requests: req, Limits: lim}
}

func podWith(rs ...v1.ResourceRequirements) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"}}
	for i, r := range rs {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: string(rune('a' + i)), Resources: r})
	}
	return p
}

func TestComputeClass(t *testing.T) {
	guaranteed := res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))
	tests := []struct {
		name   string
		pod    *v1.Pod
		mutate func(*v1.Pod)
		want   v1.PodQOSClass
	}{
		{name: "nothing", pod: podWith(v1.ResourceRequirements{}), want: v1.PodQOSBestEffort},
		{name: "only ephemeral storage", pod: podWith(res(rl("ephemeral-storage", "1Gi"), nil)), want: v1.PodQOSBestEffort},
		{name: "cpu request only", pod: podWith(res(rl("cpu", "100m"), nil)), want: v1.PodQOSBurstable},
		{name: "equal requests and limits", pod: podWith(guaranteed), want: v1.PodQOSGuaranteed},
		{name: "limits only count as requests", pod: podWith(res(nil, rl("cpu", "1", "memory", "1Gi"))), want: v1.PodQOSGuaranteed},
		{name: "cpu only guaranteed", pod: podWith(res(rl("cpu", "1"), rl("cpu", "1"))), want: v1.PodQOSBurstable},
		{name: "request below limit", pod: podWith(res(rl("cpu", "500m", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))), want: v1.PodQOSBurstable},
		{name: "guaranteed and besteffort containers", pod: podWith(guaranteed, v1.ResourceRequirements{}), want: v1.PodQOSBurstable},
		{name: "two guaranteed", pod: podWith(guaranteed, guaranteed), want: v1.PodQOSGuaranteed},
		{name: "init container decides too", pod: podWith(guaranteed), mutate: func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i"}}
		}, want: v1.PodQOSBurstable},
		{name: "pod-level resources win", pod: podWith(v1.ResourceRequirements{}), mutate: func(p *v1.Pod) {
			r := guaranteed
			p.Spec.Resources = &r
		}, want: v1.PodQOSGuaranteed},
		{name: "pod-level burstable over guaranteed containers", pod: podWith(guaranteed), mutate: func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Requests: rl("cpu", "1", "memory", "1Gi"), Limits: rl("cpu", "2", "memory", "1Gi")}
		}, want: v1.PodQOSBurstable},
		{name: "empty pod-level resources are ignored", pod: podWith(guaranteed), mutate: func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{}
		}, want: v1.PodQOSGuaranteed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.mutate != nil {
				tt.mutate(tt.pod)
			}
			if got := ComputeClass(tt.pod); got != tt.want {
				t.Errorf("ComputeClass = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestClassPrefersStatus(t *testing.T) {
	p := podWith(v1.ResourceRequirements{})
	p.Status.QOSClass = v1.PodQOSGuaranteed
	if got := Class(p); got != v1.PodQOSGuaranteed {
		t.Errorf("Class = %s, want the recorded Guaranteed", got)
	}
}

func TestMilliCPUToShares(t *testing.T) {
	for _, tt := range []struct {
		milli int64
		want  uint64
	}{{0, 2}, {1, 2}, {2, 2}, {3, 3}, {100, 102}, {250, 256}, {1000, 1024}, {1500, 1536}, {256000, 262144}, {300000, 262144}} {
		if got := MilliCPUToShares(tt.milli); got != tt.want {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tt.milli, got, tt.want)
		}
	}
}

func TestMilliCPUToQuota(t *testing.T) {
	for _, tt := range []struct {
		milli, period, want int64
	}{{0, 100000, 0}, {5, 100000, 1000}, {10, 100000, 1000}, {200, 100000, 20000}, {1500, 100000, 150000}, {500, 50000, 25000}, {1000, 1000000, 1000000}} {
		if got := MilliCPUToQuota(tt.milli, tt.period); got != tt.want {
			t.Errorf("MilliCPUToQuota(%d, %d) = %d, want %d", tt.milli, tt.period, got, tt.want)
		}
	}
}

func TestOOMScoreAdj(t *testing.T) {
	const capacity = 4 << 30
	burst := func(mem string) v1.ResourceRequirements { return res(rl("memory", mem), nil) }
	tests := []struct {
		name   string
		pod    *v1.Pod
		mutate func(*v1.Pod)
		want   int64
	}{
		{name: "guaranteed", pod: podWith(res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))), want: -997},
		{name: "besteffort", pod: podWith(v1.ResourceRequirements{}), want: 1000},
		{name: "burstable quarter of memory", pod: podWith(burst("1Gi")), want: 750},
		{name: "burstable without memory request", pod: podWith(res(rl("cpu", "1"), nil)), want: 999},
		{name: "burstable tiny request", pod: podWith(burst("1Ki")), want: 999},
		{name: "burstable asks for everything", pod: podWith(burst("4Gi")), want: 3},
		{name: "burstable asks for more than the node", pod: podWith(burst("8Gi")), want: 3},
		{name: "node critical besteffort", pod: podWith(v1.ResourceRequirements{}), mutate: func(p *v1.Pod) {
			p.Spec.PriorityClassName = "system-node-critical"
			p.Spec.Priority = ptr.To[int32](2000001000)
		}, want: -997},
		{name: "node critical class, ordinary priority", pod: podWith(v1.ResourceRequirements{}), mutate: func(p *v1.Pod) {
			p.Spec.PriorityClassName = "system-node-critical"
			p.Spec.Priority = ptr.To[int32](10)
		}, want: 1000},
		{name: "static node critical", pod: podWith(v1.ResourceRequirements{}), mutate: func(p *v1.Pod) {
			p.Spec.PriorityClassName = "system-node-critical"
			p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
		}, want: -997},
		{name: "pod-level request spread over containers", pod: podWith(burst("1Gi"), v1.ResourceRequirements{}), mutate: func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Requests: rl("memory", "3Gi")}
		}, want: 1000 - 1000*(1<<30+1<<30)/capacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.mutate != nil {
				tt.mutate(tt.pod)
			}
			if got := OOMScoreAdj(tt.pod, &tt.pod.Spec.Containers[0], capacity); got != tt.want {
				t.Errorf("OOMScoreAdj = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestOOMScoreAdjSidecar(t *testing.T) {
	p := podWith(res(rl("memory", "2Gi"), nil), res(rl("memory", "1Gi"), nil))
	p.Spec.InitContainers = []v1.Container{{Name: "side", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways),
		Resources: res(rl("memory", "100Mi"), nil)}}
	// The sidecar asks for little but scores as the app container asking least.
	if got, want := OOMScoreAdj(p, &p.Spec.InitContainers[0], 4<<30), int64(750); got != want {
		t.Errorf("sidecar OOMScoreAdj = %d, want %d", got, want)
	}
}

func TestContainerResources(t *testing.T) {
	opts := NodeOptions{CPUCFSQuota: true, MemoryCapacity: 4 << 30, HugePageSizes: []string{"2MB", "1GB"}}
	noHuge := []*runtimeapi.HugepageLimit{{PageSize: "2MB"}, {PageSize: "1GB"}}
	tests := []struct {
		name   string
		pod    *v1.Pod
		mutate func(*v1.Pod)
		opts   func(*NodeOptions)
		want   *runtimeapi.LinuxContainerResources
	}{
		{name: "besteffort", pod: podWith(v1.ResourceRequirements{}),
			want: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000, HugepageLimits: noHuge}},
		{name: "guaranteed", pod: podWith(res(rl("cpu", "500m", "memory", "128Mi"), rl("cpu", "500m", "memory", "128Mi"))),
			want: &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000,
				MemoryLimitInBytes: 128 << 20, OomScoreAdj: -997, HugepageLimits: noHuge}},
		{name: "burstable limit only on cpu uses limit for shares", pod: podWith(res(rl("memory", "1Gi"), rl("cpu", "250m"))),
			want: &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuPeriod: 100000, CpuQuota: 25000,
				OomScoreAdj: 750, HugepageLimits: noHuge}},
		{name: "quota off", pod: podWith(res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "2", "memory", "2Gi"))),
			opts: func(o *NodeOptions) { o.CPUCFSQuota = false },
			want: &runtimeapi.LinuxContainerResources{CpuShares: 1024, MemoryLimitInBytes: 2 << 30, OomScoreAdj: 750, HugepageLimits: noHuge}},
		{name: "custom period", pod: podWith(res(rl("cpu", "100m"), rl("cpu", "200m"))),
			opts: func(o *NodeOptions) { o.CPUCFSQuotaPeriod = 50 * time.Millisecond },
			want: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 50000, CpuQuota: 10000, OomScoreAdj: 999, HugepageLimits: noHuge}},
		{name: "huge pages", pod: podWith(res(rl("memory", "1Gi", "hugepages-2Mi", "4Mi"), rl("memory", "1Gi", "hugepages-2Mi", "4Mi"))),
			want: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30, OomScoreAdj: 750,
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}, {PageSize: "1GB"}}}},
		{name: "pod-level limits fill in", pod: podWith(res(rl("cpu", "100m", "memory", "1Gi"), nil)), mutate: func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Requests: rl("cpu", "1", "memory", "2Gi"), Limits: rl("cpu", "1", "memory", "2Gi")}
		}, want: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, CpuQuota: 100000,
			MemoryLimitInBytes: 2 << 30, OomScoreAdj: -997, HugepageLimits: noHuge}},
		{name: "oom group", pod: podWith(v1.ResourceRequirements{}), opts: func(o *NodeOptions) { o.OOMKillGroup = true },
			want: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000, HugepageLimits: noHuge,
				Unified: map[string]string{"memory.oom.group": "1"}}},
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
			got := ContainerResources(tt.pod, &tt.pod.Spec.Containers[0], o)
			if got.String() != tt.want.String() {
				t.Errorf("ContainerResources =\n %v\nwant\n %v", got, tt.want)
			}
		})
	}
}

func TestHugePageSize(t *testing.T) {
	for _, tt := range []struct {
		name v1.ResourceName
		want string
		ok   bool
	}{{"hugepages-2Mi", "2MB", true}, {"hugepages-1Gi", "1GB", true}, {"hugepages-64Ki", "64KB", true},
		{"hugepages-junk", "", false}, {"memory", "", false}, {"hugepages-100", "", false}} {
		got, ok := HugePageSize(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("HugePageSize(%s) = %q %v, want %q %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestSandboxResources(t *testing.T) {
	opts := NodeOptions{CPUCFSQuota: true}
	p := podWith(res(rl("cpu", "100m", "memory", "64Mi"), rl("cpu", "200m", "memory", "128Mi")),
		res(rl("cpu", "300m", "memory", "64Mi"), rl("cpu", "300m", "memory", "128Mi")))
	p.Spec.Overhead = rl("cpu", "50m", "memory", "10Mi")
	got := SandboxResources(p, opts)
	want := &runtimeapi.LinuxContainerResources{CpuShares: 409, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 256 << 20}
	if got.String() != want.String() {
		t.Errorf("SandboxResources = %v, want %v (overhead excluded)", got, want)
	}
	over := OverheadResources(p, opts)
	wantOver := &runtimeapi.LinuxContainerResources{CpuShares: 51, CpuPeriod: 100000, CpuQuota: 5000, MemoryLimitInBytes: 10 << 20}
	if over.String() != wantOver.String() {
		t.Errorf("OverheadResources = %v, want %v", over, wantOver)
	}
	if got := OverheadResources(podWith(v1.ResourceRequirements{}), opts); got.String() != "" {
		t.Errorf("no overhead = %v, want empty", got)
	}
}
