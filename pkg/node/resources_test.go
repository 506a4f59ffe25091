package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestAllocatable(t *testing.T) {
	base := func() (v1.ResourceList, v1.ResourceList, v1.ResourceList, map[string]string) {
		return capacity(Machine{NumCPU: 4, MemoryBytes: 8 << 30, EphemeralStorageBytes: 100 << 30}, 110), nil, nil, nil
	}
	tests := []struct {
		name   string
		mutate func(c, kube, sys v1.ResourceList, ev map[string]string) (v1.ResourceList, v1.ResourceList, v1.ResourceList, map[string]string)
		want   map[v1.ResourceName]string
	}{
		{
			name: "no reservations",
			want: map[v1.ResourceName]string{v1.ResourceCPU: "4", v1.ResourceMemory: "8Gi", v1.ResourceEphemeralStorage: "100Gi", v1.ResourcePods: "110"},
		},
		{
			name: "default eviction thresholds",
			mutate: func(c, k, s v1.ResourceList, _ map[string]string) (v1.ResourceList, v1.ResourceList, v1.ResourceList, map[string]string) {
				return c, k, s, map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%"}
			},
			want: map[v1.ResourceName]string{v1.ResourceMemory: "8092Mi", v1.ResourceEphemeralStorage: "96636764k" /* 100Gi minus 10% at the kubelet's float32 precision */},
		},
		{
			name: "kube and system reserved add up",
			mutate: func(c, _, _ v1.ResourceList, ev map[string]string) (v1.ResourceList, v1.ResourceList, v1.ResourceList, map[string]string) {
				return c, v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("1Gi")},
					v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")}, ev
			},
			want: map[v1.ResourceName]string{v1.ResourceCPU: "3", v1.ResourceMemory: "7Gi"},
		},
		{
			name: "never below zero",
			mutate: func(c, _, s v1.ResourceList, ev map[string]string) (v1.ResourceList, v1.ResourceList, v1.ResourceList, map[string]string) {
				return c, v1.ResourceList{v1.ResourceCPU: resource.MustParse("64")}, s, ev
			},
			want: map[v1.ResourceName]string{v1.ResourceCPU: "0"},
		},
		{
			name: "huge pages come out of memory",
			mutate: func(c, k, s v1.ResourceList, ev map[string]string) (v1.ResourceList, v1.ResourceList, v1.ResourceList, map[string]string) {
				c["hugepages-2Mi"] = resource.MustParse("1Gi")
				return c, k, s, ev
			},
			want: map[v1.ResourceName]string{v1.ResourceMemory: "7Gi", "hugepages-2Mi": "1Gi"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, k, s, ev := base()
			if tt.mutate != nil {
				c, k, s, ev = tt.mutate(c, k, s, ev)
			}
			th, err := ParseThresholds("evictionHard", ev)
			if err != nil {
				t.Fatal(err)
			}
			got := allocatable(c, k, s, th)
			for name, want := range tt.want {
				checkQuantity(t, got, name, want)
			}
		})
	}
}

func TestParseThresholdsAndReservedErrors(t *testing.T) {
	if _, err := ParseThresholds("evictionHard", map[string]string{"memory.available": "lots"}); err == nil ||
		!strings.Contains(err.Error(), "evictionHard[memory.available]") {
		t.Errorf("bad quantity: %v", err)
	}
	if _, err := ParseThresholds("evictionHard", map[string]string{"nodefs.available": "110%"}); err == nil {
		t.Errorf("110%% accepted")
	}
	if _, err := ParseReserved("kubeReserved", map[string]string{"gpu": "1"}); err == nil || !strings.Contains(err.Error(), "kubeReserved[gpu]") {
		t.Errorf("unsupported resource: %v", err)
	}
}

func TestHostReader(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("/proc/meminfo", "MemTotal:       16303856 kB\nMemFree:  1 kB\n")
	write("/proc/cpuinfo", "processor\t: 0\nmodel name: x\n\nprocessor\t: 1\n")
	write("/etc/machine-id", "abc123\n")
	write("/proc/sys/kernel/random/boot_id", "b-1\n")
	write("/proc/sys/kernel/osrelease", "6.8.0-45-generic\n")
	write("/etc/os-release", "NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\n")
	write("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "3\n")
	write("/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "0\n")

	m, err := HostReader{Root: root, RootDir: "/x", StatFS: func(string) (int64, error) { return 42, nil }}.Read()
	if err != nil {
		t.Fatal(err)
	}
	if m.NumCPU != 2 || m.MemoryBytes != 16303856*1024 || m.EphemeralStorageBytes != 42 {
		t.Errorf("cpu/mem/storage = %d/%d/%d", m.NumCPU, m.MemoryBytes, m.EphemeralStorageBytes)
	}
	if m.MachineID != "abc123" || m.BootID != "b-1" || m.KernelVersion != "6.8.0-45-generic" || m.OSImage != "Ubuntu 24.04.1 LTS" || m.SystemUUID != "abc123" /* no DMI: the machine ID, as cAdvisor */ {
		t.Errorf("identity = %+v", m)
	}
	if m.HugePages["2Mi"] != 3*2<<20 || m.HugePages["1Gi"] != 0 || len(m.HugePages) != 2 {
		t.Errorf("hugepages = %v", m.HugePages)
	}
}

// TestNoEphemeralStorage: with localStorageCapacityIsolation off the root dir's filesystem
// is not measured and the node reports no ephemeral-storage, as the kubelet.
func TestNoEphemeralStorage(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "meminfo"), []byte("MemTotal:       1024 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	statfs := func(string) (int64, error) { return 0, errors.New("measured") }
	m, err := HostReader{Root: root, RootDir: "/var/lib/kubelet", StatFS: statfs, NoEphemeralStorage: true}.Read()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if _, ok := capacity(m, 110)[v1.ResourceEphemeralStorage]; ok {
		t.Errorf("capacity %v has ephemeral-storage", capacity(m, 110))
	}
	if _, err := (HostReader{Root: root, RootDir: "/var/lib/kubelet", StatFS: statfs}).Read(); err == nil {
		t.Errorf("with isolation on, the root dir's filesystem was not measured")
	}
}
