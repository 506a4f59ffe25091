package main

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

func TestValidateEnforcement(t *testing.T) {
	tests := []struct {
		name     string
		keys     []string
		sys, kub string
		want     string
	}{
		{name: "pods", keys: []string{"pods"}},
		{name: "none", keys: []string{"none"}},
		{name: "none with pods", keys: []string{"none", "pods"}, want: `may not hold anything beside "none"`},
		{name: "reserved with cgroups", keys: []string{"pods", "system-reserved", "kube-reserved-compressible"}, sys: "/system.slice", kub: "/kube"},
		{name: "system reserved without a cgroup", keys: []string{"system-reserved"}, want: "systemReservedCgroup: must be set"},
		{name: "kube reserved without a cgroup", keys: []string{"kube-reserved"}, want: "kubeReservedCgroup: must be set"},
		{name: "both system forms", keys: []string{"system-reserved", "system-reserved-compressible"}, sys: "/s", want: "exclude each other"},
		{name: "duplicate", keys: []string{"pods", "pods"}, want: `duplicated enforcement "pods"`},
		{name: "unknown", keys: []string{"pod"}, want: `unknown enforcement "pod"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc := &kubeletv1beta1.KubeletConfiguration{EnforceNodeAllocatable: tt.keys, SystemReservedCgroup: tt.sys, KubeReservedCgroup: tt.kub}
			var got []string
			validateEnforcement(kc, func(field, format string, args ...any) {
				got = append(got, field+": "+fmt.Sprintf(format, args...))
			})
			all := strings.Join(got, "; ")
			if (tt.want == "") != (len(got) == 0) || !strings.Contains(all, tt.want) {
				t.Errorf("errors %q, want %q", all, tt.want)
			}
		})
	}
}

func TestKubepodsLimits(t *testing.T) {
	capacity := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"),
		v1.ResourcePods: resource.MustParse("110"), v1.ResourceEphemeralStorage: resource.MustParse("100Gi")}
	cfg := &agentConfig{
		kubelet:        &kubeletv1beta1.KubeletConfiguration{EnforceNodeAllocatable: []string{"pods"}},
		kubeReserved:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("1Gi")},
		systemReserved: v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m")},
	}
	got := kubepodsLimits(cfg, capacity)
	if cpu, mem := got[v1.ResourceCPU], got[v1.ResourceMemory]; cpu.MilliValue() != 1700 || mem.Value() != 3<<30 || len(got) != 2 {
		t.Errorf("enforced limits = %v, want cpu 1700m, memory 3Gi only", got)
	}
	cfg.kubelet.EnforceNodeAllocatable = []string{"none"}
	got = kubepodsLimits(cfg, capacity)
	if cpu := got[v1.ResourceCPU]; cpu.MilliValue() != 2000 {
		t.Errorf("unenforced cpu = %v, want the capacity", cpu.String())
	}
}
