package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// BenchmarkCompute is one status computation of a running pod with an init container, a
// sidecar and two app containers: the work done for every pod on every sync.
func BenchmarkCompute(b *testing.B) {
	p := pod(v1.RestartPolicyAlways, "init")
	always := v1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: "sidecar", Image: "busybox", RestartPolicy: &always})
	p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "c2", Image: "busybox"})
	initDone := ctr("init", runtime.ContainerExited, 0)
	initDone.Init = true
	side := ctr("sidecar", runtime.ContainerRunning, 0)
	side.Init = true
	in := Input{Pod: p, Observed: observed(initDone, side, ctr("c", runtime.ContainerRunning, 0), ctr("c2", runtime.ContainerRunning, 0)),
		Now: t0, RuntimeName: "containerd", NodeIPs: []string{"10.254.254.1"},
		Probes: func(string) ProbeResults { return ProbeResults{Started: true, Ready: true} }}
	b.ReportAllocs()
	for b.Loop() {
		if st := Compute(in); st.Phase != v1.PodRunning {
			b.Fatalf("phase %s", st.Phase)
		}
	}
}
